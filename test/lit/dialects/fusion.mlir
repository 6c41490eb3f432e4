// fusion.region (dialects/fusion.py) prints and parses back; its body is
// isolated from above: the block arguments are its operands.
// RUN: xtpu-opt %s | filecheck %s
// RUN: xtpu-opt %s | xtpu-opt | filecheck %s

// CHECK-LABEL: func @round_trip
// CHECK-NEXT:    %r, %m = fusion.region "input"(%x, %z) : (tensor<2x3xf32>, tensor<f32>) -> (tensor<2x3xf32>, tensor<2xf32>) {
// CHECK-NEXT:    ^bb0(%a: tensor<2x3xf32>, %i: tensor<f32>):
// CHECK-NEXT:      %e = hlo.exponential %a : tensor<2x3xf32>
// CHECK-NEXT:      %s = hlo.reduce(%e init : %i) applies max across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
// CHECK-NEXT:      fusion.yield %e, %s : tensor<2x3xf32>, tensor<2xf32>
// CHECK-NEXT:    }
func.func @round_trip(%x: tensor<2x3xf32>, %z: tensor<f32>) -> (tensor<2x3xf32>, tensor<2xf32>) {
  %r, %m = fusion.region "input"(%x, %z) : (tensor<2x3xf32>, tensor<f32>) -> (tensor<2x3xf32>, tensor<2xf32>) {
  ^bb0(%a: tensor<2x3xf32>, %i: tensor<f32>):
    %e = hlo.exponential %a : tensor<2x3xf32>
    %s = hlo.reduce(%e init: %i) applies max across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    fusion.yield %e, %s : tensor<2x3xf32>, tensor<2xf32>
  }
  func.return %r, %m : tensor<2x3xf32>, tensor<2xf32>
}
