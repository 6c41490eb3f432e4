// Malformed complex<f32> literals: a parse error at the literal, never a
// Python traceback.
// RUN: xtpu-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// CHECK: expected a complex element (real, imag) for type tensor<2xcomplex<f32>>
func.func @float_literal_for_complex() {
  %c = hlo.constant dense<[1.0, 2.0]> : tensor<2xcomplex<f32>>
  func.return
}

// -----

// CHECK: hexadecimal float constant out of range for type f32
func.func @wide_hex_part() {
  %c = hlo.constant dense<(0x7FF0000000000000, 0.0)> : tensor<complex<f32>>
  func.return
}

// -----

// CHECK: hexadecimal float literal should not have a leading minus
func.func @negative_hex_part() {
  %c = hlo.constant dense<(1.0, -0x7F800000)> : tensor<complex<f32>>
  func.return
}

// -----

// CHECK: Complex value must be either (float, float) or (int, int)
func.func @bool_and_hex_parts() {
  %c = hlo.constant dense<(true, 0x7F800000)> : tensor<complex<f32>>
  func.return
}
