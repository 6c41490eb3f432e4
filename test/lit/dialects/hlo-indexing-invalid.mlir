// Verifiers of hlo.gather, hlo.scatter, hlo.sort and hlo.variadic_reduce:
// each message names the StableHLO constraint it checks (spec: gather,
// scatter, sort, reduce), or says which dtype or result type is wrong.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'hlo.gather' op rank of the operand float32[10x4] must equal size(offset_dims) + size(collapsed_slice_dims) + size(operand_batching_dims) = 1 + 0 + 0 (C1)
func.func @gather_c1(%t: tensor<10x4xf32>, %ids: tensor<3xi32>) {
  %r = hlo.gather %t[%ids] offset_dims = [1], collapsed_slice_dims = [], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 4] : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<3x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.gather' op index_vector_dim 2 must be in [0, 1] for start_indices int32[3] (C2)
func.func @gather_c2(%t: tensor<10x4xf32>, %ids: tensor<3xi32>) {
  %r = hlo.gather %t[%ids] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 2, slice_sizes = [1, 4] : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<3x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.gather' op start_index_map [0] must have 2 entries, the index vector size (C3)
func.func @gather_c3(%t: tensor<10x4xf32>, %ids: tensor<3x2xi32>) {
  %r = hlo.gather %t[%ids] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 4] : (tensor<10x4xf32>, tensor<3x2xi32>) -> tensor<3x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.gather' op offset_dims [2, 1] must be sorted and unique (C4)
func.func @gather_c4(%t: tensor<10x4x2xf32>, %ids: tensor<3xi32>) {
  %r = hlo.gather %t[%ids] offset_dims = [2, 1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 4, 2] : (tensor<10x4x2xf32>, tensor<3xi32>) -> tensor<3x4x2xf32>
  func.return
}

// -----

// CHECK: 'hlo.gather' op slice_sizes [2, 4] must be at most 1 at collapsed_slice_dims [0] (C9)
func.func @gather_c9(%t: tensor<10x4xf32>, %ids: tensor<3xi32>) {
  %r = hlo.gather %t[%ids] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [2, 4] : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<3x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.gather' op operand batching dimension 0 (size 2) and start_indices batching dimension 0 (size 3) must have one size (C17)
func.func @gather_c17(%p: tensor<2x5x3xf64>, %ids: tensor<3x4xi64>) {
  %r = hlo.gather %p[%ids] offset_dims = [2], collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2, slice_sizes = [1, 1, 3] : (tensor<2x5x3xf64>, tensor<3x4xi64>) -> tensor<3x4x3xf64>
  func.return
}

// -----

// CHECK: 'hlo.gather' op slice size 5 out of range for operand dimension 1 of size 4 (C21)
func.func @gather_c21(%t: tensor<10x4xf32>, %ids: tensor<3xi32>) {
  %r = hlo.gather %t[%ids] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 5] : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<3x5xf32>
  func.return
}

// -----

// CHECK: 'hlo.gather' op inferred result type(s) (tensor<3x4xf32>) do not match the declared (tensor<4x3xf32>)
func.func @gather_result(%t: tensor<10x4xf32>, %ids: tensor<3xi32>) {
  %r = hlo.gather %t[%ids] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 4] : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<4x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.gather' op start_indices must be int32 or int64, got float32[3]
func.func @gather_float_ids(%t: tensor<10x4xf32>, %ids: tensor<3xf32>) {
  %r = hlo.gather %t[%ids] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 4] : (tensor<10x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.scatter' op updates float32[3x5] must have the scatter dimensions [3] and window sizes at most [4] (at update_window_dims [1]) (C4)
func.func @scatter_c4(%t: tensor<10x4xf32>, %ids: tensor<3xi32>, %u: tensor<3x5xf32>) {
  %r = hlo.scatter %t[%ids], %u applies add update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x5xf32>) -> tensor<10x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.scatter' op updates float64[3x4] must have the input's element type float32 (C6)
func.func @scatter_c6(%t: tensor<10x4xf32>, %ids: tensor<3xi32>, %u: tensor<3x4xf64>) {
  %r = hlo.scatter %t[%ids], %u applies add update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x4xf64>) -> tensor<10x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.scatter' op scatter_dims_to_operand_dims [0] must have 2 entries, the index vector size (C19)
func.func @scatter_c19(%t: tensor<10x4xf32>, %ids: tensor<3x2xi32>, %u: tensor<3x4xf32>) {
  %r = hlo.scatter %t[%ids], %u applies add update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<10x4xf32>, tensor<3x2xi32>, tensor<3x4xf32>) -> tensor<10x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.scatter' op of bools supports replace, max and min, not add
func.func @scatter_bool_add(%t: tensor<10xi1>, %ids: tensor<3xi32>, %u: tensor<3xi1>) {
  %r = hlo.scatter %t[%ids], %u applies add update_window_dims = [], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<10xi1>, tensor<3xi32>, tensor<3xi1>) -> tensor<10xi1>
  func.return
}

// -----

// CHECK: 'hlo.sort' op inputs of hlo.sort must have one shape, got float32[3] and float32[4] (C3)
func.func @sort_c1(%a: tensor<3xf32>, %b: tensor<4xf32>) {
  %s:2 = hlo.sort %a, %b dim = 0 directions = [LT] stable : (tensor<3xf32>, tensor<4xf32>) -> (tensor<3xf32>, tensor<4xf32>)
  func.return
}

// -----

// CHECK: 'hlo.sort' op dimension 1 out of range for rank 1 (C4)
func.func @sort_c4(%a: tensor<3xf32>) {
  %s = hlo.sort %a dim = 1 directions = [LT] stable : (tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

// CHECK: 'hlo.sort' op comparison_directions [LT, GT] must give 1 to 1 keys (C5)
func.func @sort_too_many_keys(%a: tensor<3xf32>) {
  %s = hlo.sort %a dim = 0 directions = [LT, GT] stable : (tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

// CHECK: 'hlo.sort' op comparison_directions [LE] must be LT or GT (a strict weak order) (C5)
func.func @sort_direction(%a: tensor<3xf32>) {
  %s = hlo.sort %a dim = 0 directions = [LE] stable : (tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

// CHECK: 'hlo.variadic_reduce' op inputs must have one shape, got float32[2x5] and int64[5x2] (C1)
func.func @argmax_shapes(%x: tensor<2x5xf32>, %i: tensor<5x2xi64>, %a: tensor<f32>, %b: tensor<i64>) {
  %v, %j = hlo.variadic_reduce(%x init : %a), (%i init : %b) applies argmax across dimensions = [1] : (tensor<2x5xf32>, tensor<5x2xi64>, tensor<f32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xi64>)
  func.return
}

// -----

// CHECK: 'hlo.variadic_reduce' op init_value must be a scalar of the input's dtype float32, got float64[] (C2)
func.func @argmax_init(%x: tensor<2x5xf32>, %i: tensor<2x5xi64>, %a: tensor<f64>, %b: tensor<i64>) {
  %v, %j = hlo.variadic_reduce(%x init : %a), (%i init : %b) applies argmax across dimensions = [1] : (tensor<2x5xf32>, tensor<2x5xi64>, tensor<f64>, tensor<i64>) -> (tensor<2xf32>, tensor<2xi64>)
  func.return
}

// -----

// CHECK: 'hlo.variadic_reduce' op dimensions [2] out of range for rank 2 (C4)
func.func @argmax_dims(%x: tensor<2x5xf32>, %i: tensor<2x5xi64>, %a: tensor<f32>, %b: tensor<i64>) {
  %v, %j = hlo.variadic_reduce(%x init : %a), (%i init : %b) applies argmin across dimensions = [2] : (tensor<2x5xf32>, tensor<2x5xi64>, tensor<f32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xi64>)
  func.return
}
