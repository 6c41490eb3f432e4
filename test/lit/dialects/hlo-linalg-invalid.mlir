// The verifier of hlo.svd (dialects/hlo_linalg.py).
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'hlo.svd' op needs an operand of rank at least 2 (matrices), got float32[4]
func.func @vector(%x: tensor<4xf32>) {
  %0 = hlo.svd %x compute_uv = false : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// CHECK: 'hlo.svd' op does not support dtype int32; expected one of float32, float64, bfloat16, float16
func.func @integers(%x: tensor<3x4xi32>) {
  %0 = hlo.svd %x compute_uv = false : (tensor<3x4xi32>) -> tensor<3xi32>
  func.return
}

// -----

// CHECK: 'hlo.svd' op inferred result type(s) (tensor<3xf32>, tensor<3x3xf32>, tensor<4x3xf32>) do not match the declared (tensor<3xf32>)
func.func @vectors_missing(%x: tensor<3x4xf32>) {
  %0 = hlo.svd %x compute_uv = true : (tensor<3x4xf32>) -> tensor<3xf32>
  func.return
}

// -----

// CHECK: 'hlo.svd' op inferred result type(s) (tensor<2x3xf32>) do not match the declared (tensor<2x4xf32>)
func.func @too_many_values(%x: tensor<2x3x4xf32>) {
  %0 = hlo.svd %x compute_uv = false : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  func.return
}
