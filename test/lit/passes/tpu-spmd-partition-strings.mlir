// tpu-spmd-partition rebuilds each op from its parameters: a string
// constant keeps its shape (a scalar stays a scalar; its value attribute
// lists the elements flat). Found by the fuzzer (issue 25): a folded
// tf.strings.format of a constant, in a replica split over 2 cores, came out
// as tensor<1x!hlo.string> and the replicate op no longer verified.
// RUN: xtpu-opt %s --split-input-file -p tpu-spmd-partition | filecheck %s

// CHECK-LABEL: func @scalar_string_constant
// CHECK:         %s = hlo.string_constant ["[1]"] : tensor<!hlo.string>
// CHECK-NEXT:    tpu.yield %s : tensor<!hlo.string>
func.func @scalar_string_constant() -> tensor<!hlo.string> {
  %r = tpu.replicate() {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [], tpu.output_shardings = [#tpu.sharding<{replicated}>]} -> (tensor<!hlo.string>) {
    %s = hlo.string_constant ["[1]"] {tpu.sharding = [#tpu.sharding<{replicated}>]} : tensor<!hlo.string>
    tpu.yield %s : tensor<!hlo.string>
  }
  func.return %r : tensor<!hlo.string>
}

// -----

// CHECK-LABEL: func @matrix_string_constant
// CHECK:         %s = hlo.string_constant ["a", "b", "c", "d"] : tensor<2x2x!hlo.string>
// CHECK-NEXT:    tpu.yield %s : tensor<2x2x!hlo.string>
func.func @matrix_string_constant() -> tensor<2x2x!hlo.string> {
  %r = tpu.replicate() {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [], tpu.output_shardings = [#tpu.sharding<{replicated}>]} -> (tensor<2x2x!hlo.string>) {
    %s = hlo.string_constant ["a", "b", "c", "d"] {tpu.sharding = [#tpu.sharding<{replicated}>]} : tensor<2x2x!hlo.string>
    tpu.yield %s : tensor<2x2x!hlo.string>
  }
  func.return %r : tensor<2x2x!hlo.string>
}
