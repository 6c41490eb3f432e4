// Windowed ops whose bodies xtpu's ops do not have are refused, naming the op.
// RUN: not xtpu-opt %s 2>&1 | filecheck %s

// CHECK: xtpu-opt: error: 'stablehlo.reduce_window' op in @main at import-windows-invalid-body.mlir:{{.*}} reduces its windows by mul; xtpu's reduce_window applies add, max or min
module {
  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %one = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %0 = "stablehlo.reduce_window"(%x, %one) <{padding = dense<[[3, 0]]> : tensor<1x2xi64>, window_dimensions = array<i64: 4>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %m = stablehlo.multiply %a, %b : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
