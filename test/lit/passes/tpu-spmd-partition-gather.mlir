// Gathers and scatters of whole rows over logical cores (GSPMD's gather
// and scatter handlers): tpu-propagate-sharding carries the splits,
// tpu-spmd-partition gathers from a row-split table with masked ids and one
// all-reduce, gathers split ids locally, and scatters into a row-split
// input locally.  Bytes per core: xtpu.passes.spmd_cost.
// RUN: xtpu-opt %s --split-input-file -p tpu-propagate-sharding,tpu-spmd-partition | filecheck %s
// RUN: xtpu-opt %s --split-input-file -p tpu-propagate-sharding | filecheck %s --check-prefix=PROP

// A table of 1000 rows over 4 cores, 64 replicated ids: each core gathers
// from its 250 rows (the ids clamped to [0, 999] as the global gather
// clamps them, minus its first row), zeroes the ids of other cores' rows
// and one all-reduce sums the row blocks: 2 x 3/4 x 4 KiB = 6 KiB per core,
// against 3/4 x 64 KB to gather the table.
// PROP-LABEL: func @gather_rows_split
// PROP:         hlo.gather {{.*}} {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK-LABEL: func @gather_rows_split
// CHECK:         as %x: tensor<250x16xf32>
// CHECK:         %[[FIRST:.*]] = hlo.constant dense<[0, 250, 500, 750]> : tensor<4xi32>
// CHECK:         %[[HI:.*]] = hlo.constant dense<999> : tensor<i32>
// CHECK:         hlo.maximum %ids
// CHECK:         hlo.minimum
// CHECK:         %[[LOCAL:.*]] = hlo.subtract
// CHECK:         hlo.compare GE, %[[LOCAL]]
// CHECK:         hlo.compare LT, %[[LOCAL]]
// CHECK:         %[[G:.*]] = hlo.gather %x[%[[LOCAL]]] {{.*}} slice_sizes = [1, 16] : (tensor<250x16xf32>, tensor<64xi32>) -> tensor<64x16xf32>
// CHECK:         %g_partial = hlo.select %{{.*}}, %[[G]], %{{.*}} : (tensor<64x16xi1>, tensor<64x16xf32>, tensor<64x16xf32>) -> tensor<64x16xf32>
// CHECK-NEXT:    %g = ccl.all_reduce %g_partial applies add groups = dense<{{\[\[}}0, 1, 2, 3{{\]\]}}> : tensor<1x4xi64> channel 1 : tensor<64x16xf32>
// CHECK-NEXT:    tpu.yield %g : tensor<64x16xf32>
// CHECK-NOT:     ccl.all_gather
func.func @gather_rows_split(%t: tensor<1000x16xf32>, %i: tensor<64xi32>) -> tensor<64x16xf32> {
  %r = tpu.replicate([%t] as %x: tensor<1000x16xf32>, [%i] as %ids: tensor<64xi32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[4,1]<=[4]}> : tensor<1000x16xf32>
    %g = hlo.gather %xs[%ids] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 16] : (tensor<1000x16xf32>, tensor<64xi32>) -> tensor<64x16xf32>
    tpu.yield %g : tensor<64x16xf32>
  }
  func.return %r : tensor<64x16xf32>
}

// -----

// A small table and many ids: all-reducing the [512, 4] result (2 x 1/2 x
// 8 KiB per core) would move more than gathering the other half of the
// [16, 4] table (128 bytes): the cost model gathers the table, then the
// gather is local.
// CHECK-LABEL: func @gather_small_table_is_gathered
// CHECK:         %[[T:.*]] = ccl.all_gather %x dim = 0 groups = dense<{{\[\[}}0, 1{{\]\]}}> : tensor<1x2xi64> channel 1 : (tensor<8x4xf32>) -> tensor<16x4xf32>
// CHECK-NEXT:    %g = hlo.gather %[[T]][%ids] {{.*}} : (tensor<16x4xf32>, tensor<512xi32>) -> tensor<512x4xf32>
// CHECK-NOT:     ccl.all_reduce
func.func @gather_small_table_is_gathered(%t: tensor<16x4xf32>, %i: tensor<512xi32>) -> tensor<512x4xf32> {
  %r = tpu.replicate([%t] as %x: tensor<16x4xf32>, [%i] as %ids: tensor<512xi32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1]<=[2]}> : tensor<16x4xf32>
    %g = hlo.gather %xs[%ids] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 4] : (tensor<16x4xf32>, tensor<512xi32>) -> tensor<512x4xf32>
    tpu.yield %g : tensor<512x4xf32>
  }
  func.return %r : tensor<512x4xf32>
}

// -----

// Ids split over 4 cores, the table whole: each core gathers its 16 ids,
// the result keeps the ids' split.  No collective.
// PROP-LABEL: func @gather_ids_split
// PROP:         hlo.gather {{.*}} {tpu.sharding = [#tpu.sharding<{devices=[4,1]<=[4]}>]}
// CHECK-LABEL: func @gather_ids_split
// CHECK:         tpu.output_shardings = [#tpu.sharding<{devices=[4,1]<=[4]}>]
// CHECK-NEXT:    %g = hlo.gather %x[%ids] {{.*}} : (tensor<1000x16xf32>, tensor<16xi32>) -> tensor<16x16xf32>
// CHECK-NEXT:    tpu.yield %g : tensor<16x16xf32>
// CHECK-NOT:     ccl.
func.func @gather_ids_split(%t: tensor<1000x16xf32>, %i: tensor<64xi32>) -> tensor<64x16xf32> {
  %r = tpu.replicate([%t] as %x: tensor<1000x16xf32>, [%i] as %ids: tensor<64xi32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %is = tpu.sharding_constraint %ids to #tpu.sharding<{devices=[4]<=[4]}> : tensor<64xi32>
    %g = hlo.gather %x[%is] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 16] : (tensor<1000x16xf32>, tensor<64xi32>) -> tensor<64x16xf32>
    tpu.yield %g : tensor<64x16xf32>
  }
  func.return %r : tensor<64x16xf32>
}

// -----

// A scatter-add into a row-split input (a gather's gradient, an
// unsorted_segment_sum): each core scatters the ids minus its first row,
// the scatter drops those outside its 250 rows.  Local: no collective.
// PROP-LABEL: func @scatter_rows_split
// PROP:         hlo.scatter {{.*}} {tpu.sharding = [#tpu.sharding<{devices=[4,1]<=[4]}>]}
// CHECK-LABEL: func @scatter_rows_split
// CHECK:         %[[FIRST:.*]] = hlo.constant dense<[0, 250, 500, 750]> : tensor<4xi32>
// CHECK:         %[[LOCAL:.*]] = hlo.subtract %ids, %{{.*}} : tensor<64xi32>
// CHECK-NEXT:    %s = hlo.scatter %x[%[[LOCAL]]], %upd applies add {{.*}} : (tensor<250x16xf32>, tensor<64xi32>, tensor<64x16xf32>) -> tensor<250x16xf32>
// CHECK-NEXT:    tpu.yield %s : tensor<250x16xf32>
// CHECK-NOT:     ccl.
func.func @scatter_rows_split(%t: tensor<1000x16xf32>, %i: tensor<64xi32>, %u: tensor<64x16xf32>) -> tensor<1000x16xf32> {
  %r = tpu.replicate([%t] as %x: tensor<1000x16xf32>, [%i] as %ids: tensor<64xi32>, [%u] as %upd: tensor<64x16xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[4,1]<=[4]}> : tensor<1000x16xf32>
    %s = hlo.scatter %xs[%ids], %upd applies add update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<1000x16xf32>, tensor<64xi32>, tensor<64x16xf32>) -> tensor<1000x16xf32>
    tpu.yield %s : tensor<1000x16xf32>
  }
  func.return %r : tensor<1000x16xf32>
}

// -----

// A gather that is not of whole rows (a window of 2 rows): no rule, the
// operands are made whole and the result is whole.
// PROP-LABEL: func @gather_window_is_whole
// PROP:         hlo.gather {{.*}} {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK-LABEL: func @gather_window_is_whole
// CHECK:         ccl.all_gather %x
// CHECK:         hlo.gather {{.*}} : (tensor<8x4xf32>, tensor<3x1xi32>) -> tensor<3x2x4xf32>
func.func @gather_window_is_whole(%t: tensor<8x4xf32>, %i: tensor<3x1xi32>) -> tensor<3x2x4xf32> {
  %r = tpu.replicate([%t] as %x: tensor<8x4xf32>, [%i] as %ids: tensor<3x1xi32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1]<=[2]}> : tensor<8x4xf32>
    %g = hlo.gather %xs[%ids] offset_dims = [1, 2], collapsed_slice_dims = [], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [2, 4] : (tensor<8x4xf32>, tensor<3x1xi32>) -> tensor<3x2x4xf32>
    tpu.yield %g : tensor<3x2x4xf32>
  }
  func.return %r : tensor<3x2x4xf32>
}
