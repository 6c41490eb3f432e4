// A convolution widening integers (i8 -> i32) is refused: xtpu's widens only to a float.
// RUN: not xtpu-opt %s 2>&1 | filecheck %s

// CHECK: xtpu-opt: error: 'stablehlo.convolution' op in @main at import-windows-invalid-conv.mlir:{{.*}} has int32 results for int8 operands (xtpu's convolution widens only to a float)
module {
  func.func public @main(%x: tensor<1x4x2xi8>, %w: tensor<3x2x2xi8>) -> tensor<1x2x2xi32> {
    %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x4x2xi8>, tensor<3x2x2xi8>) -> tensor<1x2x2xi32>
    return %0 : tensor<1x2x2xi32>
  }
}
