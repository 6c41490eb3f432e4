// Malformed bf16 / f16 literals: a parse error at the literal, never a
// Python traceback.
// RUN: xtpu-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// CHECK: hexadecimal float constant out of range for type bf16
func.func @bf16_hex_too_wide() {
  %c = hlo.constant dense<0x7F800000> : tensor<bf16>
  func.return
}

// -----

// CHECK: hexadecimal float literal should not have a leading minus
func.func @f16_negative_hex() {
  %c = hlo.constant dense<-0x7C00> : tensor<f16>
  func.return
}
