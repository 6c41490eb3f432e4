// tpu-batch-replicas refuses a body with an op that has no batching rule,
// naming it (the runtime then runs such a body replica by replica).
// RUN: not xtpu-opt %s -p 'tpu-batch-replicas{replicas=4}' 2>&1 | filecheck %s

// CHECK: xtpu-opt: error: tpu-batch-replicas: 'hlo.sort' op has no batching rule
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = tpu.replicate([%a] as %x: tensor<4xf32>) {n = 1 : i64} {
    %s = hlo.sort %x dim = 0 directions = [LT] stable : (tensor<4xf32>) -> tensor<4xf32>
    tpu.yield %s : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
