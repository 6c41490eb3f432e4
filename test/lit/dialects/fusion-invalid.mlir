// fusion.region's verifier: one broken rule per case.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'fusion.region' op kind must be one of ['loop', 'input'], got 'output'
func.func @bad_kind(%x: tensor<2xf32>) {
  %r = fusion.region "output"(%x) : (tensor<2xf32>) -> tensor<2xf32> {
  ^bb0(%a: tensor<2xf32>):
    %e = hlo.exponential %a : tensor<2xf32>
    fusion.yield %e : tensor<2xf32>
  }
  func.return
}

// -----

// CHECK: 'fusion.region' op block arguments must have the operands' types
func.func @bad_args(%x: tensor<2xf32>) {
  %r = fusion.region "loop"(%x) : (tensor<2xf32>) -> tensor<3xf32> {
  ^bb0(%a: tensor<3xf32>):
    %e = hlo.exponential %a : tensor<3xf32>
    fusion.yield %e : tensor<3xf32>
  }
  func.return
}

// -----

// CHECK: 'fusion.region' op fusion.yield must give the op's result types
func.func @bad_results(%x: tensor<2xf32>) {
  %r = fusion.region "loop"(%x) : (tensor<2xf32>) -> tensor<2xf64> {
  ^bb0(%a: tensor<2xf32>):
    %e = hlo.exponential %a : tensor<2xf32>
    fusion.yield %e : tensor<2xf32>
  }
  func.return
}

// -----

// CHECK: 'fusion.region' op body holds no op
func.func @empty(%x: tensor<2xf32>) {
  %r = fusion.region "loop"(%x) : (tensor<2xf32>) -> tensor<2xf32> {
  ^bb0(%a: tensor<2xf32>):
    fusion.yield %a : tensor<2xf32>
  }
  func.return
}

// -----

// The body is isolated from above: a value of the enclosing function is an
// operand, not a capture.
// CHECK: Operation using value defined out of its IsolatedFromAbove parent
func.func @capture(%x: tensor<2xf32>) {
  %r = fusion.region "loop"(%x) : (tensor<2xf32>) -> tensor<2xf32> {
  ^bb0(%a: tensor<2xf32>):
    %e = hlo.add %a, %x : tensor<2xf32>
    fusion.yield %e : tensor<2xf32>
  }
  func.return
}
