// hlo.gather, hlo.scatter, hlo.sort and hlo.variadic_reduce
// (dialects/hlo_indexing.py; StableHLO spec: gather, scatter, sort, reduce):
// round trip in their custom and generic forms.
// RUN: xtpu-opt %s --split-input-file | xtpu-opt --split-input-file | filecheck %s
// RUN: xtpu-opt %s --split-input-file --print-op-generic | xtpu-opt --split-input-file | filecheck %s

// tf.gather(table, ids): whole rows at the ids.
// CHECK-LABEL: func.func @gather_rows
// CHECK-NEXT:    %r = hlo.gather %t[%ids] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 4] : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<3x4xf32>
func.func @gather_rows(%t: tensor<10x4xf32>, %ids: tensor<3xi32>) -> tensor<3x4xf32> {
  %r = hlo.gather %t[%ids] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 4] : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<3x4xf32>
  func.return %r : tensor<3x4xf32>
}

// -----

// tf.gather(params, ids, batch_dims=1): a batching dimension on each side.
// CHECK-LABEL: func.func @gather_batching
// CHECK-NEXT:    %r = hlo.gather %p[%ids] offset_dims = [2], collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2, slice_sizes = [1, 1, 3] : (tensor<2x5x3xf64>, tensor<2x4xi64>) -> tensor<2x4x3xf64>
func.func @gather_batching(%p: tensor<2x5x3xf64>, %ids: tensor<2x4xi64>) -> tensor<2x4x3xf64> {
  %r = hlo.gather %p[%ids] offset_dims = [2], collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2, slice_sizes = [1, 1, 3] : (tensor<2x5x3xf64>, tensor<2x4xi64>) -> tensor<2x4x3xf64>
  func.return %r : tensor<2x4x3xf64>
}

// -----

// tf.gather_nd: index vectors of two components in the last dimension.
// CHECK-LABEL: func.func @gather_nd
// CHECK-NEXT:    %r = hlo.gather %p[%ids] offset_dims = [1], collapsed_slice_dims = [0, 1], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0, 1], index_vector_dim = 1, slice_sizes = [1, 1, 3] : (tensor<4x5x3xi32>, tensor<6x2xi32>) -> tensor<6x3xi32>
func.func @gather_nd(%p: tensor<4x5x3xi32>, %ids: tensor<6x2xi32>) -> tensor<6x3xi32> {
  %r = hlo.gather %p[%ids] offset_dims = [1], collapsed_slice_dims = [0, 1], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0, 1], index_vector_dim = 1, slice_sizes = [1, 1, 3] : (tensor<4x5x3xi32>, tensor<6x2xi32>) -> tensor<6x3xi32>
  func.return %r : tensor<6x3xi32>
}

// -----

// The gradient of a gather: the cotangent added at the rows; every update computation.
// CHECK-LABEL: func.func @scatter
// CHECK-NEXT:    %a = hlo.scatter %t[%ids], %u applies add update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x4xf32>) -> tensor<10x4xf32>
// CHECK-NEXT:    %m = hlo.scatter %t[%ids], %u applies max
// CHECK-NEXT:    %n = hlo.scatter %t[%ids], %u applies min
// CHECK-NEXT:    %p = hlo.scatter %t[%ids], %u applies mul
// CHECK-NEXT:    %r = hlo.scatter %t[%ids], %u applies replace
func.func @scatter(%t: tensor<10x4xf32>, %ids: tensor<3xi32>, %u: tensor<3x4xf32>) -> tensor<10x4xf32> {
  %a = hlo.scatter %t[%ids], %u applies add update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x4xf32>) -> tensor<10x4xf32>
  %m = hlo.scatter %t[%ids], %u applies max update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x4xf32>) -> tensor<10x4xf32>
  %n = hlo.scatter %t[%ids], %u applies min update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x4xf32>) -> tensor<10x4xf32>
  %p = hlo.scatter %t[%ids], %u applies mul update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x4xf32>) -> tensor<10x4xf32>
  %r = hlo.scatter %t[%ids], %u applies replace update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x4xf32>) -> tensor<10x4xf32>
  func.return %r : tensor<10x4xf32>
}

// -----

// tf.tensor_scatter_nd_update with batching dimensions on both sides.
// CHECK-LABEL: func.func @scatter_batching
// CHECK-NEXT:    %r = hlo.scatter %x[%ids], %u applies replace update_window_dims = [2], inserted_window_dims = [1], input_batching_dims = [0], scatter_indices_batching_dims = [0], scatter_dims_to_operand_dims = [1], index_vector_dim = 2 : (tensor<2x5x3xf32>, tensor<2x3xi64>, tensor<2x3x3xf32>) -> tensor<2x5x3xf32>
func.func @scatter_batching(%x: tensor<2x5x3xf32>, %ids: tensor<2x3xi64>, %u: tensor<2x3x3xf32>) -> tensor<2x5x3xf32> {
  %r = hlo.scatter %x[%ids], %u applies replace update_window_dims = [2], inserted_window_dims = [1], input_batching_dims = [0], scatter_indices_batching_dims = [0], scatter_dims_to_operand_dims = [1], index_vector_dim = 2 : (tensor<2x5x3xf32>, tensor<2x3xi64>, tensor<2x3x3xf32>) -> tensor<2x5x3xf32>
  func.return %r : tensor<2x5x3xf32>
}

// -----

// Sort: keys first, one direction per key; payloads follow.
// CHECK-LABEL: func.func @sort
// CHECK-NEXT:    %s, %s_1 = hlo.sort %k, %v dim = 1 directions = [GT] stable : (tensor<2x5xf32>, tensor<2x5xi32>) -> (tensor<2x5xf32>, tensor<2x5xi32>)
// CHECK-NEXT:    %u = hlo.sort %k dim = 0 directions = [LT] : (tensor<2x5xf32>) -> tensor<2x5xf32>
// CHECK-NEXT:    %w, %w_1, %w_2 = hlo.sort %k, %v, %k dim = 1 directions = [LT, GT] stable : (tensor<2x5xf32>, tensor<2x5xi32>, tensor<2x5xf32>) -> (tensor<2x5xf32>, tensor<2x5xi32>, tensor<2x5xf32>)
func.func @sort(%k: tensor<2x5xf32>, %v: tensor<2x5xi32>) -> (tensor<2x5xf32>, tensor<2x5xi32>) {
  %s:2 = hlo.sort %k, %v dim = 1 directions = [GT] stable : (tensor<2x5xf32>, tensor<2x5xi32>) -> (tensor<2x5xf32>, tensor<2x5xi32>)
  %u = hlo.sort %k dim = 0 directions = [LT] : (tensor<2x5xf32>) -> tensor<2x5xf32>
  %w:3 = hlo.sort %k, %v, %k dim = 1 directions = [LT, GT] stable : (tensor<2x5xf32>, tensor<2x5xi32>, tensor<2x5xf32>) -> (tensor<2x5xf32>, tensor<2x5xi32>, tensor<2x5xf32>)
  func.return %s#0, %s#1 : tensor<2x5xf32>, tensor<2x5xi32>
}

// -----

// argmax / argmin as one two-input reduce.
// CHECK-LABEL: func.func @argmax
// CHECK-NEXT:    %v, %j = hlo.variadic_reduce(%x init : %a), (%i init : %b) applies argmax across dimensions = [1] : (tensor<2x5xf32>, tensor<2x5xi64>, tensor<f32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xi64>)
// CHECK-NEXT:    %w, %k = hlo.variadic_reduce(%x init : %a), (%i init : %b) applies argmin across dimensions = [0, 1] : (tensor<2x5xf32>, tensor<2x5xi64>, tensor<f32>, tensor<i64>) -> (tensor<f32>, tensor<i64>)
func.func @argmax(%x: tensor<2x5xf32>, %i: tensor<2x5xi64>, %a: tensor<f32>, %b: tensor<i64>) -> tensor<2xi64> {
  %v, %j = hlo.variadic_reduce(%x init : %a), (%i init : %b) applies argmax across dimensions = [1] : (tensor<2x5xf32>, tensor<2x5xi64>, tensor<f32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xi64>)
  %w, %k = hlo.variadic_reduce(%x init : %a), (%i init : %b) applies argmin across dimensions = [0, 1] : (tensor<2x5xf32>, tensor<2x5xi64>, tensor<f32>, tensor<i64>) -> (tensor<f32>, tensor<i64>)
  func.return %j : tensor<2xi64>
}
