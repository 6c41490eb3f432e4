// A reduce of two operands whose body is not argmax's or argmin's is
// refused (xtpu's variadic reduce is argmax / argmin), naming its location.
// RUN: not xtpu-opt %s 2>&1 | filecheck %s

// CHECK: xtpu-opt: error: 'stablehlo.reduce' op in @main at import-invalid-reduce.mlir:10:28 reduces 2 operands together with a body other than argmax's or argmin's (xtpu's variadic reduce)
module {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xi32>) -> tensor<i32> {
    %cst = stablehlo.constant dense<0.0> : tensor<f32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0:2 = stablehlo.reduce(%arg0 init: %cst), (%arg1 init: %c) across dimensions = [0] : (tensor<4xf32>, tensor<4xi32>, tensor<f32>, tensor<i32>) -> (tensor<f32>, tensor<i32>)
     reducer(%a: tensor<f32>, %b: tensor<f32>) (%i: tensor<i32>, %j: tensor<i32>)  {
      %s = stablehlo.add %a, %b : tensor<f32>
      %t = stablehlo.add %i, %j : tensor<i32>
      stablehlo.return %s, %t : tensor<f32>, tensor<i32>
    }
    return %0#1 : tensor<i32>
  }
}
