// A select other than GE / LE (the first maximum or minimum of a window) is refused.
// RUN: not xtpu-opt %s 2>&1 | filecheck %s

// CHECK: xtpu-opt: error: 'stablehlo.select_and_scatter' op in @main at import-windows-invalid-select.mlir:{{.*}} selects by something other than compare GE or LE of its two arguments
module {
  func.func public @main(%x: tensor<4xf32>, %s: tensor<2xf32>) -> tensor<4xf32> {
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = "stablehlo.select_and_scatter"(%x, %s, %zero) <{window_dimensions = array<i64: 2>, window_strides = array<i64: 2>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %t = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %t : tensor<f32>
    }) : (tensor<4xf32>, tensor<2xf32>, tensor<f32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
