// complex64 (issue 28): the type complex<f32> in the custom and the generic
// form; constants bit for bit (NaN with sign and payload, inf, -0.0 and
// subnormals in either part, as MLIR's hex bit patterns inside (re,im)), the
// part ops, abs's float32 result and the ops TF defines on complex64.
// RUN: xtpu-opt %s | xtpu-opt | filecheck %s
// RUN: xtpu-opt %s --print-op-generic | xtpu-opt | filecheck %s

// CHECK-LABEL: func.func @complex_constants() -> (tensor<4xcomplex<f32>>, tensor<complex<f32>>, tensor<2x2xcomplex<f32>>) {
// CHECK-NEXT:  %c = hlo.constant dense<[(1.500000e+00,-0.000000e+00), (0x7FC00000,0xFF800000), (0xFFC00001,1.401300e-45), (-0.000000e+00,0x7F800000)]> : tensor<4xcomplex<f32>>
// CHECK-NEXT:  %s = hlo.constant dense<(0x7F800001,-2.000000e+00)> : tensor<complex<f32>>
// CHECK-NEXT:  %t = hlo.constant dense<[[(1.000000e+00,2.000000e+00), (3.000000e+00,4.000000e+00)], [(-0.000000e+00,-0.000000e+00), (0.000000e+00,0.000000e+00)]]> : tensor<2x2xcomplex<f32>>
func.func @complex_constants() -> (tensor<4xcomplex<f32>>, tensor<complex<f32>>, tensor<2x2xcomplex<f32>>) {
  %c = hlo.constant dense<[(1.5, -0.0), (0x7FC00000, 0xFF800000), (0xFFC00001, 0x00000001), (-0.0, 0x7F800000)]> : tensor<4xcomplex<f32>>
  %s = hlo.constant dense<(0x7F800001, -2.0)> : tensor<complex<f32>>
  %t = hlo.constant dense<[[(1.0, 2.0), (3.0, 4.0)], [(-0.0, -0.0), (0.0, 0.0)]]> : tensor<2x2xcomplex<f32>>
  func.return %c, %s, %t : tensor<4xcomplex<f32>>, tensor<complex<f32>>, tensor<2x2xcomplex<f32>>
}

// CHECK-LABEL: func.func @parts(%z: tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>> {
// CHECK-NEXT:  %re = hlo.real %z : (tensor<3xcomplex<f32>>) -> tensor<3xf32>
// CHECK-NEXT:  %im = hlo.imag %z : (tensor<3xcomplex<f32>>) -> tensor<3xf32>
// CHECK-NEXT:  %neg = hlo.negate %im : tensor<3xf32>
// CHECK-NEXT:  %conj = hlo.complex %re, %neg : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xcomplex<f32>>
// CHECK-NEXT:  %mod = hlo.abs %z : (tensor<3xcomplex<f32>>) -> tensor<3xf32>
// CHECK-NEXT:  %same = hlo.abs %re : tensor<3xf32>
func.func @parts(%z: tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>> {
  %re = hlo.real %z : (tensor<3xcomplex<f32>>) -> tensor<3xf32>
  %im = hlo.imag %z : (tensor<3xcomplex<f32>>) -> tensor<3xf32>
  %neg = hlo.negate %im : tensor<3xf32>
  %conj = hlo.complex %re, %neg : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xcomplex<f32>>
  %mod = hlo.abs %z : (tensor<3xcomplex<f32>>) -> tensor<3xf32>
  %same = hlo.abs %re : tensor<3xf32>
  func.return %conj : tensor<3xcomplex<f32>>
}

// CHECK-LABEL: func.func @arithmetic(%a: tensor<2x3xcomplex<f32>>, %b: tensor<3x2xcomplex<f32>>) {
// CHECK-NEXT:  %one = hlo.constant dense<(1.000000e+00,0.000000e+00)> : tensor<complex<f32>>
// CHECK-NEXT:  %mul = hlo.multiply %a, %a : tensor<2x3xcomplex<f32>>
// CHECK-NEXT:  %div = hlo.divide %mul, %a : tensor<2x3xcomplex<f32>>
// CHECK-NEXT:  %exp = hlo.exponential %div : tensor<2x3xcomplex<f32>>
// CHECK-NEXT:  %eq = hlo.compare EQ, %a, %exp : (tensor<2x3xcomplex<f32>>, tensor<2x3xcomplex<f32>>) -> tensor<2x3xi1>
// CHECK-NEXT:  %prod = hlo.reduce(%a init : %one) applies mul across dimensions = [1] : (tensor<2x3xcomplex<f32>>, tensor<complex<f32>>) -> tensor<2xcomplex<f32>>
// CHECK-NEXT:  %mm = hlo.dot_general %a, %b, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x3xcomplex<f32>>, tensor<3x2xcomplex<f32>>) -> tensor<2x2xcomplex<f32>>
// CHECK-NEXT:  %to_f = hlo.convert %a : (tensor<2x3xcomplex<f32>>) -> tensor<2x3xf32>
// CHECK-NEXT:  %to_c = hlo.convert %to_f : (tensor<2x3xf32>) -> tensor<2x3xcomplex<f32>>
func.func @arithmetic(%a: tensor<2x3xcomplex<f32>>, %b: tensor<3x2xcomplex<f32>>) {
  %one = hlo.constant dense<(1.0, 0.0)> : tensor<complex<f32>>
  %mul = hlo.multiply %a, %a : tensor<2x3xcomplex<f32>>
  %div = hlo.divide %mul, %a : tensor<2x3xcomplex<f32>>
  %exp = hlo.exponential %div : tensor<2x3xcomplex<f32>>
  %eq = hlo.compare EQ, %a, %exp : (tensor<2x3xcomplex<f32>>, tensor<2x3xcomplex<f32>>) -> tensor<2x3xi1>
  %prod = hlo.reduce(%a init : %one) applies mul across dimensions = [1] : (tensor<2x3xcomplex<f32>>, tensor<complex<f32>>) -> tensor<2xcomplex<f32>>
  %mm = hlo.dot_general %a, %b, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x3xcomplex<f32>>, tensor<3x2xcomplex<f32>>) -> tensor<2x2xcomplex<f32>>
  %to_f = hlo.convert %a : (tensor<2x3xcomplex<f32>>) -> tensor<2x3xf32>
  %to_c = hlo.convert %to_f : (tensor<2x3xf32>) -> tensor<2x3xcomplex<f32>>
  func.return
}
