// The dtypes of issue 28 (bf16, f16, i8, i16, ui8, ui16, ui32, ui64) in the
// custom and the generic form; float constants bit for bit (inf, NaN with
// payload, -0.0, subnormals as MLIR's hex bit patterns), and dot_general's
// preferred element type (the float32 accumulation of bf16 operands).
// RUN: xtpu-opt %s | xtpu-opt | filecheck %s
// RUN: xtpu-opt %s --print-op-generic | xtpu-opt | filecheck %s

// CHECK-LABEL: func.func @bf16_constants() -> (tensor<6xbf16>, tensor<bf16>, tensor<2xf16>) {
// CHECK-NEXT:  %c = hlo.constant dense<[0x7F80, 0xFF80, 0x7FC5, -0.000000e+00, 9.183550e-41, 1.500000e+00]> : tensor<6xbf16>
// CHECK-NEXT:  %s = hlo.constant dense<0x7F81> : tensor<bf16>
// CHECK-NEXT:  %h = hlo.constant dense<[0x7C00, 5.960460e-08]> : tensor<2xf16>
func.func @bf16_constants() -> (tensor<6xbf16>, tensor<bf16>, tensor<2xf16>) {
  %c = hlo.constant dense<[0x7F80, 0xFF80, 0x7FC5, -0.0, 0x0001, 1.5]> : tensor<6xbf16>
  %s = hlo.constant dense<0x7F81> : tensor<bf16>
  %h = hlo.constant dense<[0x7C00, 0x0001]> : tensor<2xf16>
  func.return %c, %s, %h : tensor<6xbf16>, tensor<bf16>, tensor<2xf16>
}

// CHECK-LABEL: func.func @int_constants()
// CHECK-NEXT:  %a = hlo.constant dense<[-128, 127]> : tensor<2xi8>
// CHECK-NEXT:  %b = hlo.constant dense<[0, 255]> : tensor<2xui8>
// CHECK-NEXT:  %c = hlo.constant dense<[-32768, 32767]> : tensor<2xi16>
// CHECK-NEXT:  %d = hlo.constant dense<65535> : tensor<ui16>
// CHECK-NEXT:  %e = hlo.constant dense<4294967295> : tensor<ui32>
// CHECK-NEXT:  %f = hlo.constant dense<18446744073709551615> : tensor<ui64>
func.func @int_constants() {
  %a = hlo.constant dense<[-128, 127]> : tensor<2xi8>
  %b = hlo.constant dense<[0, 255]> : tensor<2xui8>
  %c = hlo.constant dense<[-32768, 32767]> : tensor<2xi16>
  %d = hlo.constant dense<65535> : tensor<ui16>
  %e = hlo.constant dense<4294967295> : tensor<ui32>
  %f = hlo.constant dense<18446744073709551615> : tensor<ui64>
  func.return
}

// CHECK-LABEL: func.func @bf16_matmul(%x: tensor<4x8xbf16>, %y: tensor<8x2xbf16>) -> tensor<4x2xbf16> {
// CHECK-NEXT:  %acc = hlo.dot_general %x, %y, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xf32>
// CHECK-NEXT:  %r = hlo.convert %acc : (tensor<4x2xf32>) -> tensor<4x2xbf16>
// CHECK-NEXT:  %same = hlo.dot_general %x, %y, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
func.func @bf16_matmul(%x: tensor<4x8xbf16>, %y: tensor<8x2xbf16>) -> tensor<4x2xbf16> {
  %acc = hlo.dot_general %x, %y, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xf32>
  %r = hlo.convert %acc : (tensor<4x2xf32>) -> tensor<4x2xbf16>
  %same = hlo.dot_general %x, %y, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
  func.return %r : tensor<4x2xbf16>
}

// CHECK-LABEL: func.func @int8_matmul(%x: tensor<4x8xi8>, %y: tensor<8x2xi8>) -> tensor<4x2xi32> {
// CHECK-NEXT:  %r = hlo.dot_general %x, %y, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<4x8xi8>, tensor<8x2xi8>) -> tensor<4x2xi32>
func.func @int8_matmul(%x: tensor<4x8xi8>, %y: tensor<8x2xi8>) -> tensor<4x2xi32> {
  %r = hlo.dot_general %x, %y, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<4x8xi8>, tensor<8x2xi8>) -> tensor<4x2xi32>
  func.return %r : tensor<4x2xi32>
}

// CHECK-LABEL: func.func @elementwise(%a: tensor<3xbf16>, %u: tensor<3xui32>) {
// CHECK-NEXT:  %z = hlo.constant dense<0.000000e+00> : tensor<bf16>
// CHECK-NEXT:  %add = hlo.add %a, %a : tensor<3xbf16>
// CHECK-NEXT:  %exp = hlo.exponential %a : tensor<3xbf16>
// CHECK-NEXT:  %and = hlo.and %u, %u : tensor<3xui32>
// CHECK-NEXT:  %sum = hlo.reduce(%a init : %z) applies add across dimensions = [0] : (tensor<3xbf16>, tensor<bf16>) -> tensor<bf16>
// CHECK-NEXT:  %f = hlo.convert %a : (tensor<3xbf16>) -> tensor<3xf32>
func.func @elementwise(%a: tensor<3xbf16>, %u: tensor<3xui32>) {
  %z = hlo.constant dense<0.0> : tensor<bf16>
  %add = hlo.add %a, %a : tensor<3xbf16>
  %exp = hlo.exponential %a : tensor<3xbf16>
  %and = hlo.and %u, %u : tensor<3xui32>
  %sum = hlo.reduce(%a init: %z) applies add across dimensions = [0] : (tensor<3xbf16>, tensor<bf16>) -> tensor<bf16>
  %f = hlo.convert %a : (tensor<3xbf16>) -> tensor<3xf32>
  func.return
}
