// The verifiers of dialects/hlo_bits.py's ops.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'hlo.shift_left' op does not support dtype float32; expected one of int32, int64, int8, int16, uint8, uint16, uint32, uint64
func.func @shift_float(%a: tensor<3xf32>) {
  %0 = hlo.shift_left %a, %a : tensor<3xf32>
  func.return
}

// -----

// CHECK: 'hlo.xor' op does not support dtype float64
func.func @xor_float(%a: tensor<3xf64>) {
  %0 = hlo.xor %a, %a : tensor<3xf64>
  func.return
}

// -----

// CHECK: 'hlo.bitcast_convert' op keeps the bit width: int64 has 64 bits, float32 32 (StableHLO's change of rank between widths is not supported)
func.func @bitcast_width(%a: tensor<3xi64>) {
  %0 = hlo.bitcast_convert %a : (tensor<3xi64>) -> tensor<3xf32>
  func.return
}

// -----

// CHECK: 'hlo.bitcast_convert' op converts numbers other than bool, got bool to int8
func.func @bitcast_bool(%a: tensor<3xi1>) {
  %0 = hlo.bitcast_convert %a : (tensor<3xi1>) -> tensor<3xi8>
  func.return
}
