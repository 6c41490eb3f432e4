// tpu-spmd-partition: a replica split over C logical devices becomes the
// program each core runs, with local (shard) shapes and ccl collectives
// between the cores.  Inputs are annotated as tpu-propagate-sharding leaves
// them (docs/logical-devices.md); collectives name participants r * C + c.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics -p tpu-spmd-partition | filecheck %s

// Elementwise ops on equally tiled operands run on the local tiles.
// CHECK-LABEL: func @elementwise_is_local
// CHECK:         tpu.replicate([%a] : tensor<8x6xf32> as %x: tensor<4x6xf32>, [%b] : tensor<8x6xf32> as %y: tensor<4x6xf32>)
// CHECK-SAME:      -> (tensor<8x6xf32>)
// CHECK-NEXT:      %s = hlo.add %x, %y : tensor<4x6xf32>
// CHECK-NEXT:      %p = hlo.compare GT, %s, %x : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xi1>
// CHECK-NEXT:      %m = hlo.select %p, %s, %y : (tensor<4x6xi1>, tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:      %e = hlo.exponential %m : tensor<4x6xf32>
// CHECK-NEXT:      tpu.yield %e : tensor<4x6xf32>
// CHECK-NOT:     tpu.sharding =
// CHECK-NOT:     ccl.
func.func @elementwise_is_local(%a: tensor<8x6xf32>, %b: tensor<8x6xf32>) -> tensor<8x6xf32> {
  %r = tpu.replicate([%a] as %x: tensor<8x6xf32>, [%b] as %y: tensor<8x6xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,1]0,1}>, #tpu.sharding<{devices=[2,1]0,1}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,1]0,1}>]} {
    %s = hlo.add %x, %y {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : tensor<8x6xf32>
    %p = hlo.compare GT, %s, %x {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : (tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<8x6xi1>
    %m = hlo.select %p, %s, %y {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : (tensor<8x6xi1>, tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<8x6xf32>
    %e = hlo.exponential %m {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : tensor<8x6xf32>
    tpu.yield %e : tensor<8x6xf32>
  }
  func.return %r : tensor<8x6xf32>
}

// -----

// replicated -> tiled is a local dynamic_slice at the core's offsets, read
// from per-core tables at tpu.logical_core_id (emitted once, at the top).
// CHECK-LABEL: func @replicated_operand_is_sliced
// CHECK:         as %x: tensor<4x3xf32>, [%b] as %y: tensor<8x6xf32>)
// CHECK-NEXT:      %core = tpu.logical_core_id : tensor<i32>
// CHECK-NEXT:      %[[ROWS:.*]] = hlo.constant dense<[0, 0, 4, 4]> : tensor<4xi32>
// CHECK-NEXT:      %[[R1:.*]] = hlo.dynamic_slice %[[ROWS]][%core] sizes = [1] : (tensor<4xi32>, tensor<i32>) -> tensor<1xi32>
// CHECK-NEXT:      %[[ROW:.*]] = hlo.reshape %[[R1]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT:      %[[COLS:.*]] = hlo.constant dense<[0, 3, 0, 3]> : tensor<4xi32>
// CHECK-NEXT:      %[[C1:.*]] = hlo.dynamic_slice %[[COLS]][%core] sizes = [1] : (tensor<4xi32>, tensor<i32>) -> tensor<1xi32>
// CHECK-NEXT:      %[[COL:.*]] = hlo.reshape %[[C1]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT:      %[[Y:.*]] = hlo.dynamic_slice %y[%[[ROW]], %[[COL]]] sizes = [4, 3] : (tensor<8x6xf32>, tensor<i32>, tensor<i32>) -> tensor<4x3xf32>
// CHECK-NEXT:      %s = hlo.add %x, %[[Y]] : tensor<4x3xf32>
// CHECK-NOT:     ccl.
func.func @replicated_operand_is_sliced(%a: tensor<8x6xf32>, %b: tensor<8x6xf32>) -> tensor<8x6xf32> {
  %r = tpu.replicate([%a] as %x: tensor<8x6xf32>, [%b] as %y: tensor<8x6xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,2]0,1,2,3}>, #tpu.sharding<{replicated}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,2]0,1,2,3}>]} {
    %s = hlo.add %x, %y {tpu.sharding = [#tpu.sharding<{devices=[2,2]0,1,2,3}>]} : tensor<8x6xf32>
    tpu.yield %s : tensor<8x6xf32>
  }
  func.return %r : tensor<8x6xf32>
}

// -----

// tiled -> replicated gathers along each tiled dim, between the cores that
// share the other tile coordinates, in tile order; 2 replicas x 4 cores.
// CHECK-LABEL: func @tiled_to_replicated_gathers_each_dim
// CHECK:         %n = hlo.negate %x : tensor<4x3xf32>
// CHECK-NEXT:    %[[G0:.*]] = ccl.all_gather %n dim = 0 groups = dense<{{\[\[}}0, 2], [1, 3], [4, 6], [5, 7{{\]\]}}> : tensor<4x2xi64> channel 1 : (tensor<4x3xf32>) -> tensor<8x3xf32>
// CHECK-NEXT:    %[[G1:.*]] = ccl.all_gather %[[G0]] dim = 1 groups = dense<{{\[\[}}0, 1], [2, 3], [4, 5], [6, 7{{\]\]}}> : tensor<4x2xi64> channel 2 : (tensor<8x3xf32>) -> tensor<8x6xf32>
// CHECK-NEXT:    tpu.yield %[[G1]] : tensor<8x6xf32>
func.func @tiled_to_replicated_gathers_each_dim(%a0: tensor<8x6xf32>, %a1: tensor<8x6xf32>) -> (tensor<8x6xf32>, tensor<8x6xf32>) {
  %r:2 = tpu.replicate([%a0, %a1] as %x: tensor<8x6xf32>) {n = 2 : i64, num_cores_per_replica = 4 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,2]0,1,2,3}>], tpu.output_shardings = [#tpu.sharding<{replicated}>]} {
    %n = hlo.negate %x {tpu.sharding = [#tpu.sharding<{devices=[2,2]0,1,2,3}>]} : tensor<8x6xf32>
    tpu.yield %n : tensor<8x6xf32>
  }
  func.return %r#0, %r#1 : tensor<8x6xf32>, tensor<8x6xf32>
}

// -----

// tiled on dim 0 -> tiled on dim 1: one all_to_all.
// CHECK-LABEL: func @dim_to_dim_is_all_to_all
// CHECK:         %[[T:.*]] = ccl.all_to_all %x split = 1 concat = 0 groups = dense<{{\[\[}}0, 1, 2, 3{{\]\]}}> : tensor<1x4xi64> channel 1 : (tensor<2x12xf32>) -> tensor<8x3xf32>
// CHECK-NEXT:    tpu.yield %[[T]] : tensor<8x3xf32>
func.func @dim_to_dim_is_all_to_all(%a: tensor<8x12xf32>) -> tensor<8x12xf32> {
  %r = tpu.replicate([%a] as %x: tensor<8x12xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[4,1]0,1,2,3}>], tpu.output_shardings = [#tpu.sharding<{devices=[1,4]0,1,2,3}>]} {
    tpu.yield %x : tensor<8x12xf32>
  }
  func.return %r : tensor<8x12xf32>
}

// -----

// The same tiles on other cores: one collective_permute (every core is a target).
// CHECK-LABEL: func @other_core_order_is_collective_permute
// CHECK:         ccl.collective_permute %x pairs = dense<{{\[\[}}0, 0], [2, 1], [1, 2], [3, 3{{\]\]}}> : tensor<4x2xi64> channel 1 : tensor<4x6xf32>
func.func @other_core_order_is_collective_permute(%a: tensor<8x12xf32>) -> tensor<8x12xf32> {
  %r = tpu.replicate([%a] as %x: tensor<8x12xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,2]0,1,2,3}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,2]0,2,1,3}>]} {
    tpu.yield %x : tensor<8x12xf32>
  }
  func.return %r : tensor<8x12xf32>
}

// -----

// broadcast_in_dim, reshape and transpose run locally with local shape
// parameters when the shardings line up.
// CHECK-LABEL: func @broadcast_reshape_transpose
// CHECK:         as %v: tensor<4xf32>, [%b] : tensor<4x6x8xf32> as %x: tensor<1x6x8xf32>)
// CHECK-NEXT:      %bc = hlo.broadcast_in_dim %v, dims = [0] : (tensor<4xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:      %rs = hlo.reshape %x : (tensor<1x6x8xf32>) -> tensor<6x8xf32>
// CHECK-NEXT:      %tr = hlo.transpose %rs, dims = [1, 0] : (tensor<6x8xf32>) -> tensor<8x6xf32>
// CHECK-NEXT:      tpu.yield %bc, %rs, %tr : tensor<4x3xf32>, tensor<6x8xf32>, tensor<8x6xf32>
func.func @broadcast_reshape_transpose(%a: tensor<8xf32>, %b: tensor<4x6x8xf32>) -> (tensor<8x6xf32>, tensor<24x8xf32>, tensor<8x24xf32>) {
  %r:3 = tpu.replicate([%a] as %v: tensor<8xf32>, [%b] as %x: tensor<4x6x8xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,2]0,1,2,3 last_tile_dim_replicate}>, #tpu.sharding<{devices=[4,1,1]0,1,2,3}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,2]0,1,2,3}>, #tpu.sharding<{devices=[4,1]0,1,2,3}>, #tpu.sharding<{devices=[1,4]0,1,2,3}>]} {
    %bc = hlo.broadcast_in_dim %v, dims = [0] {tpu.sharding = [#tpu.sharding<{devices=[2,2]0,1,2,3}>]} : (tensor<8xf32>) -> tensor<8x6xf32>
    %rs = hlo.reshape %x {tpu.sharding = [#tpu.sharding<{devices=[4,1]0,1,2,3}>]} : (tensor<4x6x8xf32>) -> tensor<24x8xf32>
    %tr = hlo.transpose %rs, dims = [1, 0] {tpu.sharding = [#tpu.sharding<{devices=[1,4]0,1,2,3}>]} : (tensor<24x8xf32>) -> tensor<8x24xf32>
    tpu.yield %bc, %rs, %tr : tensor<8x6xf32>, tensor<24x8xf32>, tensor<8x24xf32>
  }
  func.return %r#0, %r#1, %r#2 : tensor<8x6xf32>, tensor<24x8xf32>, tensor<8x24xf32>
}

// -----

// A reshape whose result tiles are not contiguous chunks of the operand's:
// gather, reshape the whole value, slice the result.
// CHECK-LABEL: func @reshape_of_scattered_tiles_gathers
// CHECK:         %[[G:.*]] = ccl.all_gather %x dim = 0 groups = dense<{{\[\[}}0, 1, 2, 3{{\]\]}}> : tensor<1x4xi64> channel 1 : (tensor<8xf32>) -> tensor<32xf32>
// CHECK-NEXT:    %rs = hlo.reshape %[[G]] : (tensor<32xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[S:.*]] = hlo.dynamic_slice %rs[%{{.*}}, %{{.*}}] sizes = [4, 2] : (tensor<4x8xf32>, tensor<i32>, tensor<i32>) -> tensor<4x2xf32>
// CHECK-NEXT:    tpu.yield %[[S]] : tensor<4x2xf32>
func.func @reshape_of_scattered_tiles_gathers(%a: tensor<32xf32>) -> tensor<4x8xf32> {
  %r = tpu.replicate([%a] as %x: tensor<32xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[4]0,1,2,3}>], tpu.output_shardings = [#tpu.sharding<{devices=[1,4]0,1,2,3}>]} {
    %rs = hlo.reshape %x {tpu.sharding = [#tpu.sharding<{devices=[1,4]0,1,2,3}>]} : (tensor<32xf32>) -> tensor<4x8xf32>
    tpu.yield %rs : tensor<4x8xf32>
  }
  func.return %r : tensor<4x8xf32>
}

// -----

// Contracting dim tiled on both operands: a local dot of the tiles gives
// partial sums; an all_reduce over the replica's cores adds them.
// CHECK-LABEL: func @dot_split_contraction
// CHECK:         %d_partial = hlo.dot_general %x, %w, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT:    %d = ccl.all_reduce %d_partial applies add groups = dense<{{\[\[}}0, 1{{\]\]}}> : tensor<1x2xi64> channel 1 : tensor<8x4xf32>
// CHECK-NEXT:    tpu.yield %d : tensor<8x4xf32>
func.func @dot_split_contraction(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) -> tensor<8x4xf32> {
  %r = tpu.replicate([%a] as %x: tensor<8x16xf32>, [%b] as %w: tensor<16x4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[1,2]0,1}>, #tpu.sharding<{devices=[2,1]0,1}>], tpu.output_shardings = [#tpu.sharding<{replicated}>]} {
    %d = hlo.dot_general %x, %w, batching_dims = [] x [], contracting_dims = [1] x [0] {tpu.sharding = [#tpu.sharding<{replicated}>]} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    tpu.yield %d : tensor<8x4xf32>
  }
  func.return %r : tensor<8x4xf32>
}

// -----

// With partial replication the all_reduce runs only between the cores that
// hold the different contraction tiles of the same result tile: the result
// [2,1] is replicated 4 ways over cores {0..3} and {4..7}; 2 replicas x 8 cores.
// CHECK-LABEL: func @dot_partial_replication
// CHECK:         %d_partial = hlo.dot_general %x, %w, {{.*}} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT:    %d = ccl.all_reduce %d_partial applies add groups = dense<{{\[\[}}0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15{{\]\]}}> : tensor<4x4xi64> channel 1 : tensor<4x4xf32>
// CHECK-NOT:     ccl.all_gather
func.func @dot_partial_replication(%a0: tensor<8x16xf32>, %a1: tensor<8x16xf32>, %b0: tensor<16x4xf32>, %b1: tensor<16x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  %r:2 = tpu.replicate([%a0, %a1] as %x: tensor<8x16xf32>, [%b0, %b1] as %w: tensor<16x4xf32>) {n = 2 : i64, num_cores_per_replica = 8 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,4]<=[8]}>, #tpu.sharding<{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,1,4]<=[8] last_tile_dim_replicate}>]} {
    %d = hlo.dot_general %x, %w, batching_dims = [] x [], contracting_dims = [1] x [0] {tpu.sharding = [#tpu.sharding<{devices=[2,1,4]<=[8] last_tile_dim_replicate}>]} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    tpu.yield %d : tensor<8x4xf32>
  }
  func.return %r#0, %r#1 : tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

// Batch and free dims tiled, contraction whole: a local dot, no collective.
// CHECK-LABEL: func @dot_batch_and_free_dims_are_local
// CHECK:         %d = hlo.dot_general %x, %w, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x4x6xf32>, tensor<2x6x2xf32>) -> tensor<2x4x2xf32>
// CHECK-NEXT:    tpu.yield %d : tensor<2x4x2xf32>
func.func @dot_batch_and_free_dims_are_local(%a: tensor<4x8x6xf32>, %b: tensor<4x6x2xf32>) -> tensor<4x8x2xf32> {
  %r = tpu.replicate([%a] as %x: tensor<4x8x6xf32>, [%b] as %w: tensor<4x6x2xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,2,1]0,1,2,3}>, #tpu.sharding<{devices=[2,1,1,2]0,1,2,3 last_tile_dim_replicate}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,2,1]0,1,2,3}>]} {
    %d = hlo.dot_general %x, %w, batching_dims = [0] x [0], contracting_dims = [2] x [1] {tpu.sharding = [#tpu.sharding<{devices=[2,2,1]0,1,2,3}>]} : (tensor<4x8x6xf32>, tensor<4x6x2xf32>) -> tensor<4x8x2xf32>
    tpu.yield %d : tensor<4x8x2xf32>
  }
  func.return %r : tensor<4x8x2xf32>
}

// -----

// Reductions over tiled dims: a local reduce, then an all_reduce with the
// reduce's computation over the cores holding the reduced dims' tiles.  An
// add init value that is not 0 is added once, after the all_reduce.
// CHECK-LABEL: func @reduce_over_tiled_dims
// CHECK:         %m_partial = hlo.reduce(%x init : %ninf) applies max across dimensions = [1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
// CHECK-NEXT:    %m = ccl.all_reduce %m_partial applies max groups = dense<{{\[\[}}0, 1], [2, 3{{\]\]}}> : tensor<2x2xi64> channel 1 : tensor<4xf32>
// CHECK-NEXT:    %ten = hlo.constant dense<1.000000e+01> : tensor<f32>
// CHECK-NEXT:    %[[ZERO:.*]] = hlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %s_partial = hlo.reduce(%x init : %[[ZERO]]) applies add across dimensions = [0, 1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT:    %[[SUM:.*]] = ccl.all_reduce %s_partial applies add groups = dense<{{\[\[}}0, 1, 2, 3{{\]\]}}> : tensor<1x4xi64> channel 2 : tensor<f32>
// CHECK-NEXT:    %s = hlo.add %[[SUM]], %ten : tensor<f32>
// CHECK-NEXT:    tpu.yield %m, %s : tensor<4xf32>, tensor<f32>
func.func @reduce_over_tiled_dims(%a: tensor<8x16xf32>) -> (tensor<8xf32>, tensor<f32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<8x16xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,2]0,1,2,3}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,2]0,1,2,3 last_tile_dim_replicate}>, #tpu.sharding<{replicated}>]} {
    %ninf = hlo.constant dense<-1.0e+30> : tensor<f32>
    %m = hlo.reduce(%x init: %ninf) applies max across dimensions = [1] {tpu.sharding = [#tpu.sharding<{devices=[2,2]0,1,2,3 last_tile_dim_replicate}>]} : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>
    %ten = hlo.constant dense<10.0> : tensor<f32>
    %s = hlo.reduce(%x init: %ten) applies add across dimensions = [0, 1] {tpu.sharding = [#tpu.sharding<{replicated}>]} : (tensor<8x16xf32>, tensor<f32>) -> tensor<f32>
    tpu.yield %m, %s : tensor<8xf32>, tensor<f32>
  }
  func.return %r#0, %r#1 : tensor<8xf32>, tensor<f32>
}

// -----

// iota tiled on its dimension adds the core's offset; tiled on another
// dimension it is just smaller.  A splat constant is built at its local
// shape; any other constant stays whole and is sliced.
// CHECK-LABEL: func @iota_and_constants
// CHECK:         %core = tpu.logical_core_id : tensor<i32>
// CHECK-NEXT:    %[[T:.*]] = hlo.constant dense<[0, 4]> : tensor<2xi32>
// CHECK-NEXT:    %[[T1:.*]] = hlo.dynamic_slice %[[T]][%core] sizes = [1] : (tensor<2xi32>, tensor<i32>) -> tensor<1xi32>
// CHECK-NEXT:    %[[OFF:.*]] = hlo.reshape %[[T1]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT:    %[[Z:.*]] = hlo.constant dense<0> : tensor<i32>
// CHECK-NEXT:    %[[I:.*]] = hlo.iota dim = 0 : tensor<4x4xi32>
// CHECK-NEXT:    %[[B:.*]] = hlo.broadcast_in_dim %[[OFF]], dims = [] : (tensor<i32>) -> tensor<4x4xi32>
// CHECK-NEXT:    %i = hlo.add %[[I]], %[[B]] : tensor<4x4xi32>
// CHECK-NEXT:    %j = hlo.iota dim = 1 : tensor<4x4xi32>
// CHECK-NEXT:    %c = hlo.constant dense<7> : tensor<4x4xi32>
// CHECK-NEXT:    %t = hlo.constant dense<{{.*}}> : tensor<8x4xi32>
// CHECK-NEXT:    %a = hlo.add %i, %c : tensor<4x4xi32>
// CHECK-NEXT:    %[[TS:.*]] = hlo.dynamic_slice %t[%[[OFF]], %[[Z]]] sizes = [4, 4] : (tensor<8x4xi32>, tensor<i32>, tensor<i32>) -> tensor<4x4xi32>
// CHECK-NEXT:    %b = hlo.add %j, %[[TS]] : tensor<4x4xi32>
func.func @iota_and_constants() -> (tensor<8x4xi32>, tensor<8x4xi32>) {
  %r:2 = tpu.replicate() {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [], tpu.output_shardings = [#tpu.sharding<{devices=[2,1]0,1}>, #tpu.sharding<{devices=[2,1]0,1}>]} {
    %i = hlo.iota dim = 0 {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : tensor<8x4xi32>
    %j = hlo.iota dim = 1 {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : tensor<8x4xi32>
    %c = hlo.constant {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} dense<7> : tensor<8x4xi32>
    %t = hlo.constant {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} dense<[[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6], [4, 5, 6, 7], [5, 6, 7, 8], [6, 7, 8, 9], [7, 8, 9, 10]]> : tensor<8x4xi32>
    %a = hlo.add %i, %c {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : tensor<8x4xi32>
    %b = hlo.add %j, %t {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : tensor<8x4xi32>
    tpu.yield %a, %b : tensor<8x4xi32>, tensor<8x4xi32>
  }
  func.return %r#0, %r#1 : tensor<8x4xi32>, tensor<8x4xi32>
}

// -----

// slice and concatenate keep the tiling of the dims they cut or join
// (GSPMD's HandleSlice / HandleConcatenate): the slice of columns 4:12 is a
// window inside each core's own tile of 8 columns (a local dynamic_slice at
// its offset, no collective); row tile 0 of the concatenation is x's rows
// 0:8, its own tile and the next one's (one collective_permute from the
// cores holding row tile 1), row tile 1 the same rows of the second input;
// a select by position picks the input.
// CHECK-LABEL: func @slice_and_concatenate
// CHECK:         %[[COL:.*]] = hlo.constant dense<[4, 0, 4, 0]> : tensor<4xi32>
// CHECK:         %s = hlo.dynamic_slice %x[%{{.*}}, %{{.*}}] sizes = [4, 4] : (tensor<4x8xf32>, tensor<i32>, tensor<i32>) -> tensor<4x4xf32>
// CHECK-NEXT:    %[[P1:.*]] = ccl.collective_permute %x pairs = dense<{{\[\[}}2, 0], [3, 1{{\]\]}}> : tensor<2x2xi64> channel 1 : tensor<4x8xf32>
// CHECK-NEXT:    %[[Z1:.*]] = hlo.constant dense<0.000000e+00> : tensor<4x8xf32>
// CHECK-NEXT:    %[[B1:.*]] = hlo.concatenate %x, %[[P1]], %[[Z1]] dim = 0 : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<12x8xf32>
// CHECK-NEXT:    %[[W1:.*]] = hlo.dynamic_slice %[[B1]]
// CHECK-SAME:      sizes = [8, 8]
// CHECK-NEXT:    %[[Z2:.*]] = hlo.constant dense<0.000000e+00> : tensor<4x8xf32>
// CHECK-NEXT:    %[[P2:.*]] = ccl.collective_permute %x pairs = dense<{{\[\[}}0, 2], [1, 3{{\]\]}}> : tensor<2x2xi64> channel 2 : tensor<4x8xf32>
// CHECK-NEXT:    %[[B2:.*]] = hlo.concatenate %[[Z2]], %[[P2]], %x dim = 0
// CHECK-NEXT:    %[[W2:.*]] = hlo.dynamic_slice %[[B2]]
// CHECK:         %c = hlo.select %{{.*}}, %[[W2]], %[[W1]] : (tensor<8x8xi1>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT:    tpu.yield %s, %c : tensor<4x4xf32>, tensor<8x8xf32>
// CHECK-NOT:     ccl.all_gather
func.func @slice_and_concatenate(%a: tensor<8x16xf32>) -> (tensor<8x8xf32>, tensor<16x16xf32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<8x16xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,2]0,1,2,3}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,2]0,1,2,3}>, #tpu.sharding<{devices=[2,2]0,1,2,3}>]} {
    %s = hlo.slice %x, start = [0, 4], limit = [8, 12], strides = [1, 1] {tpu.sharding = [#tpu.sharding<{devices=[2,2]0,1,2,3}>]} : (tensor<8x16xf32>) -> tensor<8x8xf32>
    %c = hlo.concatenate %x, %x dim = 0 {tpu.sharding = [#tpu.sharding<{devices=[2,2]0,1,2,3}>]} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<16x16xf32>
    tpu.yield %s, %c : tensor<8x8xf32>, tensor<16x16xf32>
  }
  func.return %r#0, %r#1 : tensor<8x8xf32>, tensor<16x16xf32>
}

// -----

// hlo.while and hlo.if: regions partitioned with the same rules; loop values
// and branch results have the local types of the op's result shardings.
// CHECK-LABEL: func @while_and_if
// CHECK:         %w, %w_1 = hlo.while(%i = %zero, %acc = %x) : tensor<i32>, tensor<4x4xf32> cond {
// CHECK:         ^bb0(%i1: tensor<i32>, %acc1: tensor<4x4xf32>):
// CHECK:           %d = hlo.add %acc1, %x : tensor<4x4xf32>
// CHECK-NEXT:      hlo.return %n, %d : tensor<i32>, tensor<4x4xf32>
// CHECK:         %f = hlo.if %p -> (tensor<4x4xf32>) {
// CHECK-NEXT:      %g = hlo.negate %w_1 : tensor<4x4xf32>
// CHECK-NEXT:      hlo.return %g : tensor<4x4xf32>
// CHECK-NEXT:    } else {
// CHECK-NEXT:      hlo.return %x : tensor<4x4xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    tpu.yield %f : tensor<4x4xf32>
func.func @while_and_if(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %r = tpu.replicate([%a] as %x: tensor<8x4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,1]0,1}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,1]0,1}>]} {
    %zero = hlo.constant dense<0> : tensor<i32>
    %one = hlo.constant dense<1> : tensor<i32>
    %w:2 = hlo.while(%i = %zero, %acc = %x) : tensor<i32>, tensor<8x4xf32> attributes {tpu.sharding = [#tpu.sharding<{replicated}>, #tpu.sharding<{devices=[2,1]0,1}>]} cond {
      %c = hlo.compare LT, %i, %one : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %c : tensor<i1>
    } do {
    ^bb0(%i1: tensor<i32>, %acc1: tensor<8x4xf32>):
      %n = hlo.add %i1, %one : tensor<i32>
      %d = hlo.add %acc1, %x {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : tensor<8x4xf32>
      hlo.return %n, %d : tensor<i32>, tensor<8x4xf32>
    }
    %p = hlo.compare GT, %w#0, %zero : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %f = hlo.if %p -> (tensor<8x4xf32>) {
      %g = hlo.negate %w#1 {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : tensor<8x4xf32>
      hlo.return %g : tensor<8x4xf32>
    } else {
      hlo.return %x : tensor<8x4xf32>
    } {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]}
    tpu.yield %f : tensor<8x4xf32>
  }
  func.return %r : tensor<8x4xf32>
}

// -----

// cross_replica_sum lowered with replica-id groups: they become per-core
// participant groups [[g * C + c for g in group] for c]; groups that already
// name participants stay.  2 replicas x 2 cores.
// CHECK-LABEL: func @cross_replica_sum_per_core
// CHECK:         %s = ccl.all_reduce %x applies add groups = dense<{{\[\[}}0, 2], [1, 3{{\]\]}}> : tensor<2x2xi64> channel 1 : tensor<4xf32>
// CHECK-NEXT:    %t = ccl.all_reduce %s applies add groups = dense<{{\[\[}}0, 2], [1, 3{{\]\]}}> : tensor<2x2xi64> channel 2 : tensor<4xf32>
func.func @cross_replica_sum_per_core(%a0: tensor<8xf32>, %a1: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %r:2 = tpu.replicate([%a0, %a1] as %x: tensor<8xf32>) {n = 2 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2]0,1}>], tpu.output_shardings = [#tpu.sharding<{devices=[2]0,1}>]} {
    %s = ccl.all_reduce %x applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 1 {tpu.sharding = [#tpu.sharding<{devices=[2]0,1}>]} : tensor<8xf32>
    %t = ccl.all_reduce %s applies add groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64> channel 2 {tpu.sharding = [#tpu.sharding<{devices=[2]0,1}>]} : tensor<8xf32>
    tpu.yield %t : tensor<8xf32>
  }
  func.return %r#0, %r#1 : tensor<8xf32>, tensor<8xf32>
}

// -----

// The seed's example: an image [batch, width, height, channel] split
// [1, 2, 4, 1] over 8 logical devices (as tpu-propagate-sharding annotates
// it) feeding relu, reshape, dot and reduce.  The reshape needs whole
// height rows (one all_gather over the 4 cores of each width half); the dot
// contracts each core's half of the 192 features against its half of the
// weights and adds the halves (groups pair the cores of the two halves).
// CHECK-LABEL: func @seed_image_over_8_cores
// CHECK:         tpu.replicate([%img] : tensor<2x8x8x3xf32> as %x: tensor<2x4x2x3xf32>, [%wt] : tensor<192x16xf32> as %w: tensor<96x16xf32>)
// CHECK-NEXT:      %act = hlo.maximum %x, %x : tensor<2x4x2x3xf32>
// CHECK-NEXT:      %[[H:.*]] = ccl.all_gather %act dim = 2 groups = dense<{{\[\[}}0, 1, 2, 3], [4, 5, 6, 7{{\]\]}}> : tensor<2x4xi64> channel 1 : (tensor<2x4x2x3xf32>) -> tensor<2x4x8x3xf32>
// CHECK-NEXT:      %flat = hlo.reshape %[[H]] : (tensor<2x4x8x3xf32>) -> tensor<2x96xf32>
// CHECK-NEXT:      %h_partial = hlo.dot_general %flat, %w, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x96xf32>, tensor<96x16xf32>) -> tensor<2x16xf32>
// CHECK-NEXT:      %h = ccl.all_reduce %h_partial applies add groups = dense<{{\[\[}}0, 4], [1, 5], [2, 6], [3, 7{{\]\]}}> : tensor<4x2xi64> channel 2 : tensor<2x16xf32>
// CHECK-NEXT:      %z = hlo.constant dense<0.000000e+00> : tensor<2x16xf32>
// CHECK-NEXT:      %relu = hlo.maximum %h, %z : tensor<2x16xf32>
// CHECK-NEXT:      %zero = hlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:      %sum = hlo.reduce(%relu init : %zero) applies add across dimensions = [1] : (tensor<2x16xf32>, tensor<f32>) -> tensor<2xf32>
// CHECK-NEXT:      tpu.yield %sum : tensor<2xf32>
// CHECK-NOT:     tpu.sharding_constraint
func.func @seed_image_over_8_cores(%img: tensor<2x8x8x3xf32>, %wt: tensor<192x16xf32>) -> tensor<2xf32> {
  %r = tpu.replicate([%img] as %x: tensor<2x8x8x3xf32>, [%wt] as %w: tensor<192x16xf32>) {n = 1 : i64, num_cores_per_replica = 8 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[1,2,4,1]<=[8]}>, #tpu.sharding<{devices=[2,1,4]<=[8] last_tile_dim_replicate}>], tpu.output_shardings = [#tpu.sharding<{replicated}>]} {
    %split = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,2,4,1]<=[8]}> {tpu.sharding = [#tpu.sharding<{devices=[1,2,4,1]<=[8]}>]} : tensor<2x8x8x3xf32>
    %act = hlo.maximum %split, %split {tpu.sharding = [#tpu.sharding<{devices=[1,2,4,1]<=[8]}>]} : tensor<2x8x8x3xf32>
    %flat = hlo.reshape %act {tpu.sharding = [#tpu.sharding<{devices=[1,2,4]<=[8] last_tile_dim_replicate}>]} : (tensor<2x8x8x3xf32>) -> tensor<2x192xf32>
    %h = hlo.dot_general %flat, %w, batching_dims = [] x [], contracting_dims = [1] x [0] {tpu.sharding = [#tpu.sharding<{replicated}>]} : (tensor<2x192xf32>, tensor<192x16xf32>) -> tensor<2x16xf32>
    %z = hlo.constant {tpu.sharding = [#tpu.sharding<{replicated}>]} dense<0.0> : tensor<2x16xf32>
    %relu = hlo.maximum %h, %z {tpu.sharding = [#tpu.sharding<{replicated}>]} : tensor<2x16xf32>
    %zero = hlo.constant {tpu.sharding = [#tpu.sharding<{replicated}>]} dense<0.0> : tensor<f32>
    %sum = hlo.reduce(%relu init: %zero) applies add across dimensions = [1] {tpu.sharding = [#tpu.sharding<{replicated}>]} : (tensor<2x16xf32>, tensor<f32>) -> tensor<2xf32>
    tpu.yield %sum : tensor<2xf32>
  }
  func.return %r : tensor<2xf32>
}

// -----

// The same model with the image given whole (replicated) and split inside:
// the constraint becomes a slice at each core's [width, height] offsets.
// CHECK-LABEL: func @seed_image_split_inside
// CHECK:         %core = tpu.logical_core_id : tensor<i32>
// CHECK:         hlo.constant dense<[0, 0, 0, 0, 4, 4, 4, 4]> : tensor<8xi32>
// CHECK:         hlo.constant dense<[0, 2, 4, 6, 0, 2, 4, 6]> : tensor<8xi32>
// CHECK:         %split = hlo.dynamic_slice %x[{{.*}}] sizes = [2, 4, 2, 3] : (tensor<2x8x8x3xf32>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<2x4x2x3xf32>
// CHECK-NEXT:    %act = hlo.maximum %split, %split : tensor<2x4x2x3xf32>
func.func @seed_image_split_inside(%img: tensor<2x8x8x3xf32>) -> tensor<2x8x8x3xf32> {
  %r = tpu.replicate([%img] as %x: tensor<2x8x8x3xf32>) {n = 1 : i64, num_cores_per_replica = 8 : i64, tpu.input_shardings = [#tpu.sharding<{replicated}>], tpu.output_shardings = [#tpu.sharding<{devices=[1,2,4,1]<=[8]}>]} {
    %split = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,2,4,1]<=[8]}> {tpu.sharding = [#tpu.sharding<{devices=[1,2,4,1]<=[8]}>]} : tensor<2x8x8x3xf32>
    %act = hlo.maximum %split, %split {tpu.sharding = [#tpu.sharding<{devices=[1,2,4,1]<=[8]}>]} : tensor<2x8x8x3xf32>
    tpu.yield %act : tensor<2x8x8x3xf32>
  }
  func.return %r : tensor<2x8x8x3xf32>
}

// -----

// {maximal device=d} values are computed on every core (same values; only
// core d's copy is used): a whole value, no communication after the gather.
// CHECK-LABEL: func @maximal_runs_on_every_core
// CHECK:         %m = ccl.all_gather %x dim = 0 groups = dense<{{\[\[}}0, 1{{\]\]}}> : tensor<1x2xi64> channel 1 : (tensor<4xf32>) -> tensor<8xf32>
// CHECK-NEXT:    %y = hlo.multiply %m, %m : tensor<8xf32>
// CHECK-NEXT:    tpu.yield %y : tensor<8xf32>
func.func @maximal_runs_on_every_core(%a: tensor<8xf32>) -> tensor<8xf32> {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2]0,1}>], tpu.output_shardings = [#tpu.sharding<{maximal device=1}>]} {
    %m = tpu.sharding_constraint %x to #tpu.sharding<{maximal device=1}> {tpu.sharding = [#tpu.sharding<{maximal device=1}>]} : tensor<8xf32>
    %y = hlo.multiply %m, %m {tpu.sharding = [#tpu.sharding<{maximal device=1}>]} : tensor<8xf32>
    tpu.yield %y : tensor<8xf32>
  }
  func.return %r : tensor<8xf32>
}

// -----

// Without annotations every value is whole; the boundary shardings are made
// explicit.  A replicate with one core is not touched.
// CHECK-LABEL: func @unannotated
// CHECK:         tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{replicated}>], tpu.output_shardings = [#tpu.sharding<{replicated}>]}
// CHECK-NEXT:      %y = hlo.negate %x : tensor<8xf32>
// CHECK-LABEL: func @one_core_is_untouched
// CHECK:         tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64} {
// CHECK-NEXT:      %y = hlo.negate %x {tpu.sharding = [#tpu.sharding<{replicated}>]} : tensor<8xf32>
func.func @unannotated(%a: tensor<8xf32>) -> tensor<8xf32> {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %y = hlo.negate %x : tensor<8xf32>
    tpu.yield %y : tensor<8xf32>
  }
  func.return %r : tensor<8xf32>
}
func.func @one_core_is_untouched(%a: tensor<8xf32>) -> tensor<8xf32> {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64} {
    %y = hlo.negate %x {tpu.sharding = [#tpu.sharding<{replicated}>]} : tensor<8xf32>
    tpu.yield %y : tensor<8xf32>
  }
  func.return %r : tensor<8xf32>
}

// -----

// Host transfers use whole values: a split value is gathered before it is
// sent, and what the host sends back is whole on every core (the runtime lets
// core 0 talk to the host and hands the answer to the other cores).
// CHECK-LABEL: func @host_transfers_use_whole_values
// CHECK:         %[[G:.*]] = ccl.all_gather %x dim = 0
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_0_args"(%[[G]] : tensor<8xf32>)
// CHECK-NEXT:    %[[R:.*]] = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<8xf32>
// CHECK:         hlo.dynamic_slice %[[R]]
func.func @host_transfers_use_whole_values(%a: tensor<8xf32>) -> tensor<8xf32> {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2]0,1}>], tpu.output_shardings = [#tpu.sharding<{devices=[2]0,1}>]} {
    tpu.send_to_host "host_compute_channel_0_args"(%x : tensor<8xf32>)
    %y = tpu.recv_from_host "host_compute_channel_0_retvals" {tpu.sharding = [#tpu.sharding<{replicated}>]} : tensor<8xf32>
    tpu.yield %y : tensor<8xf32>
  }
  func.return %r : tensor<8xf32>
}

// -----

// CHECK: 'hlo.negate' op result 0 has sharding {devices=[2]0,1} over 2 devices, but a replica has 4 logical devices
func.func @wrong_device_count(%a: tensor<8xf32>) {
  tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %y = hlo.negate %x {tpu.sharding = [#tpu.sharding<{devices=[2]0,1}>]} : tensor<8xf32>
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'hlo.negate' op result 0: sharding {devices=[4]0,1,2,3} cuts dimension 0 of shape [6] into 4 tiles, but 6 is not divisible by 4 (xtpu requires even splits)
func.func @uneven_split(%a: tensor<6xf32>) {
  tpu.replicate([%a] as %x: tensor<6xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %y = hlo.negate %x {tpu.sharding = [#tpu.sharding<{devices=[4]0,1,2,3}>]} : tensor<6xf32>
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'ccl.all_gather' op is already a collective; in a replica split over 2 logical devices only ccl.all_reduce (from tpu.cross_replica_sum) can be partitioned
func.func @other_collective(%a: tensor<8xf32>) {
  tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %y = ccl.all_gather %x dim = 0 groups = dense<[[0, 1]]> : tensor<1x2xi64> : (tensor<8xf32>) -> tensor<16xf32>
    tpu.yield
  }
  func.return
}

// -----

// The verifier rejects these groups before the pass runs.
// CHECK: 'ccl.all_reduce' op replica_groups {{\[\[}}0, 1, 2{{\]\]}} misses participants [3]; it must cover each of the 4 participants exactly once (the enclosing tpu.replicate runs 2 replicas x 2 logical cores, participants r * 2 + c; before tpu-spmd-partition they may be the 2 replica ids instead)
func.func @all_reduce_groups(%a: tensor<8xf32>, %b: tensor<8xf32>) {
  tpu.replicate([%a, %b] as %x: tensor<8xf32>) {n = 2 : i64, num_cores_per_replica = 2 : i64} {
    %y = ccl.all_reduce %x applies add groups = dense<[[0, 1, 2]]> : tensor<1x3xi64> : tensor<8xf32>
    tpu.yield
  }
  func.return
}

// -----

// A fusion.region hides its ops: the pass runs before hlo-fuse-elementwise.
// CHECK: 'fusion.region' op is formed by hlo-fuse-elementwise, the last pass: tpu-spmd-partition runs before it
func.func @after_fusion(%a: tensor<8xf32>) {
  tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %y = fusion.region "loop"(%x) : (tensor<8xf32>) -> tensor<8xf32> {
    ^bb0(%b: tensor<8xf32>):
      %n = hlo.negate %b : tensor<8xf32>
      %e = hlo.exponential %n : tensor<8xf32>
      fusion.yield %e : tensor<8xf32>
    }
    tpu.yield
  }
  func.return
}
