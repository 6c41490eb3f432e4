// Diagnostics of complex64 (issue 28): the ops that TF and StableHLO refuse
// on complex numbers (ordering comparisons, maximum, max reductions, floor),
// the part ops' dtypes and abs's result type.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'hlo.compare' op LT does not support dtype complex64; complex numbers are not ordered (EQ and NE only)
func.func @less_of_complex(%a: tensor<3xcomplex<f32>>) {
  %0 = hlo.compare LT, %a, %a : (tensor<3xcomplex<f32>>, tensor<3xcomplex<f32>>) -> tensor<3xi1>
  func.return
}

// -----

// CHECK: 'hlo.maximum' op does not support dtype complex64; expected one of float32, float64, bfloat16, float16, int32, int64, int8, int16, uint8, uint16, uint32, uint64, bool
func.func @maximum_of_complex(%a: tensor<3xcomplex<f32>>) {
  %0 = hlo.maximum %a, %a : tensor<3xcomplex<f32>>
  func.return
}

// -----

// CHECK: 'hlo.reduce' op applies max does not support dtype complex64 (add and mul only)
func.func @reduce_max_of_complex(%a: tensor<3xcomplex<f32>>, %i: tensor<complex<f32>>) {
  %0 = hlo.reduce(%a init : %i) applies max across dimensions = [0] : (tensor<3xcomplex<f32>>, tensor<complex<f32>>) -> tensor<complex<f32>>
  func.return
}

// -----

// CHECK: 'hlo.floor' op does not support dtype complex64
func.func @floor_of_complex(%a: tensor<3xcomplex<f32>>) {
  %0 = hlo.floor %a : tensor<3xcomplex<f32>>
  func.return
}

// -----

// CHECK: 'hlo.real' op does not support dtype float32; expected one of complex64
func.func @real_of_float(%a: tensor<3xf32>) {
  %0 = hlo.real %a : (tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

// CHECK: 'hlo.complex' op does not support dtype float64; expected one of float32
func.func @complex_of_f64(%a: tensor<3xf64>) {
  %0 = hlo.complex %a, %a : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xcomplex<f32>>
  func.return
}

// -----

// CHECK: 'hlo.abs' op inferred result type(s) (tensor<3xf32>) do not match the declared (tensor<3xcomplex<f32>>)
func.func @abs_keeps_complex(%a: tensor<3xcomplex<f32>>) {
  %0 = hlo.abs %a : tensor<3xcomplex<f32>>
  func.return
}

// -----

// CHECK: 'hlo.dot_general' op result type float32 must be complex64 for complex64 operands
func.func @dot_to_f32(%x: tensor<2x3xcomplex<f32>>, %y: tensor<3x2xcomplex<f32>>) {
  %r = hlo.dot_general %x, %y, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x3xcomplex<f32>>, tensor<3x2xcomplex<f32>>) -> tensor<2x2xf32>
  func.return
}

// -----

// CHECK: 'ccl.all_reduce' op applies max, which does not support dtype complex64 (not ordered)
func.func @all_reduce_max(%x: tensor<2xcomplex<f32>>) {
  %r = ccl.all_reduce %x applies max groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 1 : tensor<2xcomplex<f32>>
  func.return
}
