// The ops of dialects/hlo_bits.py (StableHLO spec: xor, shift_left,
// shift_right_logical, shift_right_arithmetic, bitcast_convert): round trip
// in their custom and generic forms.
// RUN: xtpu-opt %s | xtpu-opt | filecheck %s
// RUN: xtpu-opt %s --print-op-generic | xtpu-opt | filecheck %s

// CHECK-LABEL: func.func @bits(%a: tensor<4xui32>, %n: tensor<4xui32>, %s: tensor<4xi64>, %b: tensor<4xi1>) {
// CHECK-NEXT:    %0 = hlo.xor %a, %n : tensor<4xui32>
// CHECK-NEXT:    %1 = hlo.xor %b, %b : tensor<4xi1>
// CHECK-NEXT:    %2 = hlo.shift_left %a, %n : tensor<4xui32>
// CHECK-NEXT:    %3 = hlo.shift_right_logical %a, %n : tensor<4xui32>
// CHECK-NEXT:    %4 = hlo.shift_right_arithmetic %s, %s : tensor<4xi64>
// CHECK-NEXT:    %5 = hlo.bitcast_convert %a : (tensor<4xui32>) -> tensor<4xf32>
// CHECK-NEXT:    %6 = hlo.bitcast_convert %s : (tensor<4xi64>) -> tensor<4xui64>
// CHECK-NEXT:    func.return
func.func @bits(%a: tensor<4xui32>, %n: tensor<4xui32>, %s: tensor<4xi64>, %b: tensor<4xi1>) {
  %0 = hlo.xor %a, %n : tensor<4xui32>
  %1 = hlo.xor %b, %b : tensor<4xi1>
  %2 = hlo.shift_left %a, %n : tensor<4xui32>
  %3 = hlo.shift_right_logical %a, %n : tensor<4xui32>
  %4 = hlo.shift_right_arithmetic %s, %s : tensor<4xi64>
  %5 = hlo.bitcast_convert %a : (tensor<4xui32>) -> tensor<4xf32>
  %6 = hlo.bitcast_convert %s : (tensor<4xi64>) -> tensor<4xui64>
  func.return
}
