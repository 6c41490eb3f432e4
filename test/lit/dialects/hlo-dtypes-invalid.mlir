// Diagnostics of the dtypes of issue 28.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'hlo.dot_general' op result type int32 must be a float for float operands and an integer for integer ones, got operands bfloat16
func.func @bf16_dot_to_int(%x: tensor<4x8xbf16>, %y: tensor<8x2xbf16>) {
  %r = hlo.dot_general %x, %y, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xi32>
  func.return
}

// -----

// CHECK: 'hlo.exponential' op does not support dtype uint8; expected one of float32, float64, bfloat16, float16
func.func @exp_of_ui8(%a: tensor<3xui8>) {
  %0 = hlo.exponential %a : tensor<3xui8>
  func.return
}

// -----

// CHECK: 'hlo.add' op operand 'rhs' at position 1 does not verify:
// CHECK-NEXT: attribute tensor<3xbf16> expected from variable 'T', but got tensor<3xf32>
func.func @mixed_add(%a: tensor<3xbf16>, %b: tensor<3xf32>) {
  %0 = "hlo.add"(%a, %b) : (tensor<3xbf16>, tensor<3xf32>) -> tensor<3xbf16>
  func.return
}
