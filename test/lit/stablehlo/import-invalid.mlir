// An op xtpu cannot import is refused, naming it, its function and location.
// RUN: not xtpu-opt %s 2>&1 | filecheck %s

// CHECK: xtpu-opt: error: 'stablehlo.cbrt' op in @main at import-invalid.mlir:7:10 has no xtpu form (xtpu's StableHLO import table has no entry for it)
module {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.cbrt %arg0 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
