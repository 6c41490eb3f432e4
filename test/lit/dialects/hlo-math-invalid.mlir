// The verifiers of dialects/hlo_math.py's ops.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'hlo.rsqrt' op does not support dtype int32; expected one of float32, float64, bfloat16, float16
func.func @rsqrt_int(%a: tensor<3xi32>) {
  %0 = hlo.rsqrt %a : tensor<3xi32>
  func.return
}

// -----

// CHECK: 'hlo.sign' op does not support dtype bool; expected one of float32, float64, bfloat16, float16, int32, int64, int8, int16, uint8, uint16, uint32, uint64
func.func @sign_bool(%a: tensor<3xi1>) {
  %0 = hlo.sign %a : tensor<3xi1>
  func.return
}

// -----

// CHECK: 'hlo.is_finite' op inferred result type(s) (tensor<3xi1>) do not match the declared (tensor<3xf32>)
func.func @is_finite_result(%a: tensor<3xf32>) {
  %0 = hlo.is_finite %a : (tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

// CHECK: 'hlo.is_finite' op does not support dtype int64; expected one of float32, float64, bfloat16, float16
func.func @is_finite_int(%a: tensor<3xi64>) {
  %0 = hlo.is_finite %a : (tensor<3xi64>) -> tensor<3xi1>
  func.return
}

// -----

// CHECK: 'hlo.reverse' op dimensions [0, 0] has duplicates
func.func @reverse_duplicates(%x: tensor<2x3xf32>) {
  %0 = hlo.reverse %x, dims = [0, 0] : tensor<2x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.reverse' op dimensions [2] out of range for rank 2
func.func @reverse_out_of_range(%x: tensor<2x3xf32>) {
  %0 = hlo.reverse %x, dims = [2] : tensor<2x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.erf' op result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute tensor<3xf32> expected from variable 'T', but got tensor<3xf64>
func.func @erf_result_type(%a: tensor<3xf32>) {
  %0 = "hlo.erf"(%a) : (tensor<3xf32>) -> tensor<3xf64>
  func.return
}
