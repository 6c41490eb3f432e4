// hlo.floor's verifier: float operands only, result of the operand's type.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'hlo.floor' op does not support dtype int32; expected one of float32, float64, bfloat16, float16
func.func @floor_int(%a: tensor<3xi32>) {
  %0 = hlo.floor %a : tensor<3xi32>
  func.return
}

// -----

// CHECK: 'hlo.floor' op result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute tensor<3xf32> expected from variable 'T', but got tensor<3xf64>
func.func @floor_result_type(%a: tensor<3xf32>) {
  %0 = "hlo.floor"(%a) : (tensor<3xf32>) -> tensor<3xf64>
  func.return
}
