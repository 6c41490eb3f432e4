// The verifier of every hlo op: one broken rule per case, and its message.
// xDSL's --verify-diagnostics prints the diagnostic and goes on with the next
// case; FileCheck matches the messages in order.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: operand 'rhs' at position 1 does not verify:
// CHECK-NEXT: attribute tensor<3xf32> expected from variable 'T', but got tensor<4xf32>
func.func @add_shape_mismatch(%a: tensor<3xf32>, %b: tensor<4xf32>) {
  %0 = "hlo.add"(%a, %b) : (tensor<3xf32>, tensor<4xf32>) -> tensor<3xf32>
  func.return
}

// -----

// CHECK: 'hlo.add' op does not support dtype string; expected one of float32, float64, bfloat16, float16, int32, int64, int8, int16, uint8, uint16, uint32, uint64
func.func @add_strings(%a: tensor<!hlo.string>) {
  %0 = hlo.add %a, %a : tensor<!hlo.string>
  func.return
}

// -----

// CHECK: 'hlo.and' op does not support dtype float32; expected one of int32, int64, int8, int16, uint8, uint16, uint32, uint64, bool
func.func @and_float(%a: tensor<2xf32>) {
  %0 = hlo.and %a, %a : tensor<2xf32>
  func.return
}

// -----

// CHECK: 'hlo.exponential' op does not support dtype int32; expected one of float32, float64, bfloat16, float16
func.func @exponential_int(%a: tensor<2xi32>) {
  %0 = hlo.exponential %a : tensor<2xi32>
  func.return
}

// -----

// CHECK: result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute tensor<2xf32> expected from variable 'T', but got tensor<2xf64>
func.func @negate_result_type(%a: tensor<2xf32>) {
  %0 = "hlo.negate"(%a) : (tensor<2xf32>) -> tensor<2xf64>
  func.return
}

// -----

// CHECK: 'hlo.compare' op operands of hlo.compare must have the same shape, got float32[2] and float32[3]
func.func @compare_shape_mismatch(%a: tensor<2xf32>, %b: tensor<3xf32>) {
  %0 = hlo.compare LT, %a, %b : (tensor<2xf32>, tensor<3xf32>) -> tensor<2xi1>
  func.return
}

// -----

// CHECK: 'hlo.compare' op inferred result type(s) (tensor<2xi1>) do not match the declared (tensor<2xf32>)
func.func @compare_result_not_bool(%a: tensor<2xf32>) {
  %0 = hlo.compare LT, %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return
}

// -----

// CHECK: 'hlo.compare' op does not support strings
func.func @compare_strings(%a: tensor<!hlo.string>) {
  %0 = hlo.compare EQ, %a, %a : (tensor<!hlo.string>, tensor<!hlo.string>) -> tensor<i1>
  func.return
}

// -----

// CHECK: 'hlo.select' op predicate must be bool, got float32[2]
func.func @select_pred_not_bool(%p: tensor<2xf32>, %a: tensor<2xf32>) {
  %0 = hlo.select %p, %a, %a : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return
}

// -----

// CHECK: 'hlo.select' op predicate shape bool[3] must be a scalar or match float32[2]
func.func @select_pred_shape(%p: tensor<3xi1>, %a: tensor<2xf32>) {
  %0 = hlo.select %p, %a, %a : (tensor<3xi1>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return
}

// -----

// CHECK: 'hlo.convert' op does not convert strings; use hlo.string_to_number
func.func @convert_string(%a: tensor<!hlo.string>) {
  %0 = hlo.convert %a : (tensor<!hlo.string>) -> tensor<f32>
  func.return
}

// -----

// CHECK: 'hlo.convert' op inferred result type(s) (tensor<2xi32>) do not match the declared (tensor<3xi32>)
func.func @convert_shape(%a: tensor<2xf32>) {
  %0 = hlo.convert %a : (tensor<2xf32>) -> tensor<3xi32>
  func.return
}

// -----

// CHECK: 'hlo.constant' op inferred result type(s) (tensor<2xf32>) do not match the declared (tensor<3xf32>)
func.func @constant_type_mismatch() {
  %0 = "hlo.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
  func.return
}

// -----

// CHECK: 'hlo.string_constant' op has 2 elements for shape [3]
func.func @string_constant_count() {
  %0 = hlo.string_constant ["a", "b"] : tensor<3x!hlo.string>
  func.return
}

// -----

// CHECK: 'hlo.iota' op iota_dimension [2] out of range for rank 2
func.func @iota_dimension_out_of_range() {
  %0 = hlo.iota dim = 2 : tensor<2x4xi64>
  func.return
}

// -----

// CHECK: 'hlo.broadcast_in_dim' op broadcast_dimensions [0, 1] must have one entry per operand dimension (rank 1)
func.func @broadcast_dims_count(%a: tensor<2xf32>) {
  %0 = hlo.broadcast_in_dim %a, dims = [0, 1] : (tensor<2xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.broadcast_in_dim' op operand dimension 0 of size 2 cannot broadcast to result dimension 1 of size 3
func.func @broadcast_size(%a: tensor<2xf32>) {
  %0 = hlo.broadcast_in_dim %a, dims = [1] : (tensor<2xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.reshape' op cannot reshape float32[2x3] (6 elements) to [5] (5 elements)
func.func @reshape_size(%a: tensor<2x3xf32>) {
  %0 = hlo.reshape %a : (tensor<2x3xf32>) -> tensor<5xf32>
  func.return
}

// -----

// CHECK: 'hlo.transpose' op permutation [0, 0] is not a permutation of the 2 dimensions of float32[2x3]
func.func @transpose_not_permutation(%a: tensor<2x3xf32>) {
  %0 = hlo.transpose %a, dims = [0, 0] : (tensor<2x3xf32>) -> tensor<2x2xf32>
  func.return
}

// -----

// CHECK: 'hlo.transpose' op inferred result type(s) (tensor<3x2xf32>) do not match the declared (tensor<2x3xf32>)
func.func @transpose_result_shape(%a: tensor<2x3xf32>) {
  %0 = hlo.transpose %a, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.dot_general' op lhs dimension 1 (size 3) and rhs dimension 0 (size 4) must match
func.func @dot_contracting_sizes(%a: tensor<2x3xf32>, %b: tensor<4x2xf32>) {
  %0 = hlo.dot_general %a, %b, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<4x2xf32>) -> tensor<2x2xf32>
  func.return
}

// -----

// CHECK: 'hlo.dot_general' op operands of hlo.dot_general must have the same dtype, got float32[2x3] and float64[3x2]
func.func @dot_dtypes(%a: tensor<2x3xf32>, %b: tensor<3x2xf64>) {
  %0 = hlo.dot_general %a, %b, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x2xf64>) -> tensor<2x2xf32>
  func.return
}

// -----

// CHECK: 'hlo.reduce' op init_value must be a scalar of the input's dtype float32, got float32[3]
func.func @reduce_init_not_scalar(%a: tensor<2x3xf32>, %z: tensor<3xf32>) {
  %0 = hlo.reduce(%a init: %z) applies add across dimensions = [0] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

// CHECK: 'hlo.reduce' op dimensions [2] out of range for rank 2
func.func @reduce_dimension_out_of_range(%a: tensor<2x3xf32>, %z: tensor<f32>) {
  %0 = hlo.reduce(%a init: %z) applies add across dimensions = [2] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
  func.return
}

// -----

// CHECK: 'hlo.slice' op slice [1:5:1] is out of bounds for dimension 0 of size 4
func.func @slice_out_of_bounds(%a: tensor<4xf32>) {
  %0 = hlo.slice %a, start = [1], limit = [5], strides = [1] : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// CHECK: 'hlo.slice' op start, limit and strides need one entry per dimension of float32[4]
func.func @slice_rank(%a: tensor<4xf32>) {
  %0 = hlo.slice %a, start = [0, 0], limit = [4, 1], strides = [1, 1] : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// CHECK: 'hlo.dynamic_slice' op needs one start index per dimension of float32[4x6], got 1
func.func @dynamic_slice_start_count(%a: tensor<4x6xf32>, %i: tensor<i32>) {
  %0 = hlo.dynamic_slice %a[%i] sizes = [2, 2] : (tensor<4x6xf32>, tensor<i32>) -> tensor<2x2xf32>
  func.return
}

// -----

// CHECK: 'hlo.dynamic_slice' op start index 1 must be an integer scalar, got float32[]
func.func @dynamic_slice_float_start(%a: tensor<4x6xf32>, %i: tensor<i32>, %f: tensor<f32>) {
  %0 = hlo.dynamic_slice %a[%i, %f] sizes = [2, 2] : (tensor<4x6xf32>, tensor<i32>, tensor<f32>) -> tensor<2x2xf32>
  func.return
}

// -----

// CHECK: 'hlo.dynamic_slice' op start indices must have the same dtype, got int32[] and int64[]
func.func @dynamic_slice_mixed_starts(%a: tensor<4x6xf32>, %i: tensor<i32>, %j: tensor<i64>) {
  %0 = hlo.dynamic_slice %a[%i, %j] sizes = [2, 2] : (tensor<4x6xf32>, tensor<i32>, tensor<i64>) -> tensor<2x2xf32>
  func.return
}

// -----

// CHECK: 'hlo.dynamic_slice' op slice size 7 is out of bounds for dimension 1 of size 6
func.func @dynamic_slice_too_big(%a: tensor<4x6xf32>, %i: tensor<i32>) {
  %0 = hlo.dynamic_slice %a[%i, %i] sizes = [2, 7] : (tensor<4x6xf32>, tensor<i32>, tensor<i32>) -> tensor<2x7xf32>
  func.return
}

// -----

// CHECK: 'hlo.dynamic_slice' op inferred result type(s) (tensor<2x2xf32>) do not match the declared (tensor<2x3xf32>)
func.func @dynamic_slice_result(%a: tensor<4x6xf32>, %i: tensor<i32>) {
  %0 = hlo.dynamic_slice %a[%i, %i] sizes = [2, 2] : (tensor<4x6xf32>, tensor<i32>, tensor<i32>) -> tensor<2x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.pad' op padding_value must be a scalar of the operand's dtype float32, got float64[]
func.func @pad_value_dtype(%a: tensor<2x3xf32>, %v: tensor<f64>) {
  %0 = hlo.pad %a, %v, low = [0, 0], high = [0, 0], interior = [0, 0] : (tensor<2x3xf32>, tensor<f64>) -> tensor<2x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.pad' op padding_value must be a scalar of the operand's dtype float32, got float32[2]
func.func @pad_value_not_scalar(%a: tensor<2x3xf32>, %v: tensor<2xf32>) {
  %0 = hlo.pad %a, %v, low = [0, 0], high = [0, 0], interior = [0, 0] : (tensor<2x3xf32>, tensor<2xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.pad' op edge_padding_low [0], edge_padding_high [0, 0] and interior_padding [0, 0] need one entry per dimension of float32[2x3]
func.func @pad_rank(%a: tensor<2x3xf32>, %v: tensor<f32>) {
  %0 = hlo.pad %a, %v, low = [0], high = [0, 0], interior = [0, 0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.pad' op interior_padding [0, -1] must be non-negative
func.func @pad_negative_interior(%a: tensor<2x3xf32>, %v: tensor<f32>) {
  %0 = hlo.pad %a, %v, low = [0, 0], high = [0, 0], interior = [0, -1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x1xf32>
  func.return
}

// -----

// CHECK: 'hlo.pad' op padding dimension 1 of size 3 by low -2, high -2 and interior 0 gives a negative size -1
func.func @pad_negative_size(%a: tensor<2x3xf32>, %v: tensor<f32>) {
  %0 = hlo.pad %a, %v, low = [0, -2], high = [0, -2], interior = [0, 0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x0xf32>
  func.return
}

// -----

// CHECK: 'hlo.pad' op inferred result type(s) (tensor<3x8xf32>) do not match the declared (tensor<3x7xf32>)
func.func @pad_result(%a: tensor<2x3xf32>, %v: tensor<f32>) {
  %0 = hlo.pad %a, %v, low = [0, 1], high = [1, 0], interior = [0, 2] : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x7xf32>
  func.return
}

// -----

// CHECK: 'hlo.pad' op does not support strings
func.func @pad_strings(%a: tensor<2x!hlo.string>) {
  %0 = hlo.pad %a, %a, low = [0], high = [0], interior = [0] : (tensor<2x!hlo.string>, tensor<2x!hlo.string>) -> tensor<2x!hlo.string>
  func.return
}

// -----

// CHECK: 'hlo.dynamic_update_slice' op update float64[2x2] must have the operand's dtype and rank (float32[4x6])
func.func @dynamic_update_slice_dtype(%a: tensor<4x6xf32>, %u: tensor<2x2xf64>, %i: tensor<i32>) {
  %0 = hlo.dynamic_update_slice %a, %u at [%i, %i] : (tensor<4x6xf32>, tensor<2x2xf64>, tensor<i32>, tensor<i32>) -> tensor<4x6xf32>
  func.return
}

// -----

// CHECK: 'hlo.dynamic_update_slice' op update float32[2] must have the operand's dtype and rank (float32[4x6])
func.func @dynamic_update_slice_rank(%a: tensor<4x6xf32>, %u: tensor<2xf32>, %i: tensor<i32>) {
  %0 = hlo.dynamic_update_slice %a, %u at [%i, %i] : (tensor<4x6xf32>, tensor<2xf32>, tensor<i32>, tensor<i32>) -> tensor<4x6xf32>
  func.return
}

// -----

// CHECK: 'hlo.dynamic_update_slice' op update dimension 1 of size 7 is larger than the operand's (6)
func.func @dynamic_update_slice_too_big(%a: tensor<4x6xf32>, %u: tensor<2x7xf32>, %i: tensor<i32>) {
  %0 = hlo.dynamic_update_slice %a, %u at [%i, %i] : (tensor<4x6xf32>, tensor<2x7xf32>, tensor<i32>, tensor<i32>) -> tensor<4x6xf32>
  func.return
}

// -----

// CHECK: 'hlo.dynamic_update_slice' op needs one start index per dimension of float32[4x6], got 1
func.func @dynamic_update_slice_start_count(%a: tensor<4x6xf32>, %u: tensor<2x2xf32>, %i: tensor<i32>) {
  %0 = hlo.dynamic_update_slice %a, %u at [%i] : (tensor<4x6xf32>, tensor<2x2xf32>, tensor<i32>) -> tensor<4x6xf32>
  func.return
}

// -----

// CHECK: 'hlo.dynamic_update_slice' op start index 0 must be an integer scalar, got int32[2]
func.func @dynamic_update_slice_vector_start(%a: tensor<4x6xf32>, %u: tensor<2x2xf32>, %i: tensor<i32>, %v: tensor<2xi32>) {
  %0 = hlo.dynamic_update_slice %a, %u at [%v, %i] : (tensor<4x6xf32>, tensor<2x2xf32>, tensor<2xi32>, tensor<i32>) -> tensor<4x6xf32>
  func.return
}

// -----

// CHECK: 'hlo.dynamic_update_slice' op inferred result type(s) (tensor<4x6xf32>) do not match the declared (tensor<2x2xf32>)
func.func @dynamic_update_slice_result(%a: tensor<4x6xf32>, %u: tensor<2x2xf32>, %i: tensor<i32>) {
  %0 = hlo.dynamic_update_slice %a, %u at [%i, %i] : (tensor<4x6xf32>, tensor<2x2xf32>, tensor<i32>, tensor<i32>) -> tensor<2x2xf32>
  func.return
}

// -----

// CHECK: 'hlo.concatenate' op cannot concatenate float32[2x3] and float32[2x4] along dimension 0
func.func @concatenate_mismatch(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  %0 = hlo.concatenate %a, %b dim = 0 : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.string_format' op template '{} and {}' has 2 placeholders but 1 inputs were given
func.func @string_format_placeholders(%a: tensor<f32>) {
  %0 = hlo.string_format "{} and {}" (%a) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
  func.return
}

// -----

// CHECK: 'hlo.string_to_number' op expects a string tensor, got float32[]
func.func @string_to_number_of_number(%a: tensor<f32>) {
  %0 = hlo.string_to_number %a : (tensor<f32>) -> tensor<f32>
  func.return
}

// -----

// CHECK: 'hlo.print' op output_stream must be sys.stdout, sys.stderr or a 'file://PATH' string, got 'printer'
func.func @print_bad_stream(%a: tensor<f32>) {
  hlo.print (%a) sep = " " end = "\n" to "printer" summarize = 3 : tensor<f32>
  func.return
}

// -----

// CHECK: 'hlo.summary_scalar' op data must be a scalar of dtype float32, float64, bfloat16, float16, int32, int64, int8, int16, uint8, uint16, uint32, uint64, got float32[2]
func.func @summary_scalar_of_vector(%x: tensor<2xf32>, %s: tensor<i64>) {
  hlo.summary_scalar "loss" = %x at step %s to "/tmp/logs" : tensor<2xf32>, tensor<i64>
  func.return
}

// -----

// CHECK: 'hlo.summary_scalar' op data must be a scalar of dtype float32, float64, bfloat16, float16, int32, int64, int8, int16, uint8, uint16, uint32, uint64, got bool[]
func.func @summary_scalar_of_bool(%x: tensor<i1>, %s: tensor<i64>) {
  hlo.summary_scalar "flag" = %x at step %s to "/tmp/logs" : tensor<i1>, tensor<i64>
  func.return
}

// -----

// CHECK: 'hlo.summary_flush' op logdir must not be empty
func.func @summary_flush_without_logdir() {
  hlo.summary_flush ""
  func.return
}

// -----

// CHECK: 'hlo.summary_scalar' op step must be an int64 or int32 scalar, got float32[]
func.func @summary_scalar_float_step(%x: tensor<f32>, %s: tensor<f32>) {
  hlo.summary_scalar "loss" = %x at step %s to "/tmp/logs" : tensor<f32>, tensor<f32>
  func.return
}

// -----

// CHECK: 'hlo.summary_scalar' op replica id must be an int32 scalar, got int64[]
func.func @summary_scalar_replica_id_i64(%x: tensor<f32>, %s: tensor<i64>, %r: tensor<i64>) {
  hlo.summary_scalar "loss" = %x at step %s if replica %r is zero to "/tmp/logs" : tensor<f32>, tensor<i64>, tensor<i64>
  func.return
}

// -----

// CHECK: 'hlo.summary_scalar' op logdir must not be empty
func.func @summary_scalar_no_logdir(%x: tensor<f32>, %s: tensor<i64>) {
  hlo.summary_scalar "loss" = %x at step %s to "" : tensor<f32>, tensor<i64>
  func.return
}
