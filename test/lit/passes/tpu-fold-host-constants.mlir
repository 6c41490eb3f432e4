// tpu-fold-host-constants: host code whose inputs are all constants is
// evaluated at compile time with the op's own kernel (what the host worker
// would compute), as TF's bridge folds it with its canonicalizer. A cluster
// left with constants only is inlined: the program has no host code for it.
// Side effects (print, summaries, host variables) stay, and so does an op
// whose kernel raises (the run reports it).
// RUN: xtpu-opt %s --split-input-file -p tpu-fold-host-constants | filecheck %s

// The seed's example: outside_compilation(computation_with_string_ops, 1).
// CHECK-LABEL: func @seed_string_example
// CHECK:         tpu.replicate() {n = 2 : i64} {
// CHECK-NEXT:      %[[C:.*]] = hlo.constant dense<1.100000e+01> : tensor<f32>
// CHECK-NEXT:      tpu.yield %[[C]] : tensor<f32>
// CHECK-NOT:     tpu.outside_compilation
// CHECK-NOT:     hlo.string
func.func @seed_string_example() -> (tensor<f32>, tensor<f32>) {
  %0, %1 = tpu.replicate() {n = 2 : i64} {
    %2 = tpu.outside_compilation "0" -> (tensor<f32>) {
      %3 = hlo.constant dense<1> : tensor<i32>
      %4 = hlo.string_format "1{}"(%3) summarize = 3 : (tensor<i32>) -> tensor<!hlo.string>
      %5 = hlo.string_to_number %4 : (tensor<!hlo.string>) -> tensor<f32>
      tpu.yield %5 : tensor<f32>
    }
    tpu.yield %2 : tensor<f32>
  }
  func.return %0, %1 : tensor<f32>, tensor<f32>
}

// -----

// outside_compilation(lambda v: v * 3.0 + 1.0, constant(2.0)): the cluster's
// input is a device constant; the device uses the folded 7.0.
// CHECK-LABEL: func @cluster_of_a_device_constant
// CHECK:         tpu.replicate() {n = 1 : i64} {
// CHECK-NEXT:      %[[C:.*]] = hlo.constant dense<7.000000e+00> : tensor<f32>
// CHECK-NEXT:      %y = hlo.negate %[[C]] : tensor<f32>
// CHECK-NEXT:      tpu.yield %y : tensor<f32>
func.func @cluster_of_a_device_constant() -> tensor<f32> {
  %0 = tpu.replicate() {n = 1 : i64} {
    %2 = hlo.constant dense<2.000000e+00> : tensor<f32>
    %3 = tpu.outside_compilation "0" -> (tensor<f32>) {
      %4 = hlo.constant dense<3.000000e+00> : tensor<f32>
      %5 = hlo.multiply %2, %4 : tensor<f32>
      %6 = hlo.constant dense<1.000000e+00> : tensor<f32>
      %7 = hlo.add %5, %6 : tensor<f32>
      tpu.yield %7 : tensor<f32>
    }
    %y = hlo.negate %3 : tensor<f32>
    tpu.yield %y : tensor<f32>
  }
  func.return %0 : tensor<f32>
}

// -----

// A print is a side effect: it stays in its cluster, with its operand folded
// to a string constant.
// CHECK-LABEL: func @print_stays
// CHECK:         tpu.outside_compilation "0" {
// CHECK-NEXT:      %[[S:.*]] = hlo.string_constant ["x=1"] : tensor<!hlo.string>
// CHECK-NEXT:      hlo.print(%[[S]])
// CHECK-NEXT:      tpu.yield
func.func @print_stays() {
  tpu.replicate() {n = 1 : i64} {
    tpu.outside_compilation "0" {
      %3 = hlo.constant dense<1> : tensor<i32>
      %4 = hlo.string_format "x={}"(%3) summarize = 3 : (tensor<i32>) -> tensor<!hlo.string>
      hlo.print (%4) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>
      tpu.yield
    }
    tpu.yield
  }
  func.return
}

// -----

// A host-variable update changes host state: it stays, and the cluster too.
// CHECK-LABEL: func @host_variable_update_stays
// CHECK:         tpu.outside_compilation "0" -> (tensor<f32>) {
// CHECK-NEXT:      %[[C:.*]] = hlo.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:      %[[V:.*]] = hlo.host_variable_update "v" "add"(%[[C]] : tensor<f32>) : tensor<f32>
// CHECK-NEXT:      tpu.yield %[[V]]
func.func @host_variable_update_stays() -> tensor<f32> {
  %0 = tpu.replicate() {n = 1 : i64} {
    %1 = tpu.outside_compilation "0" -> (tensor<f32>) {
      %2 = hlo.constant dense<1.000000e+00> : tensor<f32>
      %3 = hlo.host_variable_update "v" "add" (%2 : tensor<f32>) : tensor<f32>
      tpu.yield %3 : tensor<f32>
    }
    tpu.yield %1 : tensor<f32>
  }
  func.return %0 : tensor<f32>
}

// -----

// A cluster that uses a replica input stays; its ops of constants fold.
// CHECK-LABEL: func @partly_constant_cluster
// CHECK:         tpu.outside_compilation "0" -> (tensor<f32>) {
// CHECK-NEXT:      %[[C:.*]] = hlo.constant dense<6.000000e+00> : tensor<f32>
// CHECK-NEXT:      %[[M:.*]] = hlo.multiply %x, %[[C]] : tensor<f32>
// CHECK-NEXT:      tpu.yield %[[M]]
func.func @partly_constant_cluster(%a: tensor<f32>) -> tensor<f32> {
  %0 = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %1 = tpu.outside_compilation "0" -> (tensor<f32>) {
      %2 = hlo.constant dense<2.000000e+00> : tensor<f32>
      %3 = hlo.constant dense<3.000000e+00> : tensor<f32>
      %4 = hlo.multiply %2, %3 : tensor<f32>
      %5 = hlo.multiply %x, %4 : tensor<f32>
      tpu.yield %5 : tensor<f32>
    }
    tpu.yield %1 : tensor<f32>
  }
  func.return %0 : tensor<f32>
}

// -----

// hlo.string_to_number of "one" raises: left for the run, which names the op,
// the replica and the source line.
// CHECK-LABEL: func @raising_op_stays
// CHECK:         tpu.outside_compilation "0" -> (tensor<f32>) {
// CHECK-NEXT:      %[[S:.*]] = hlo.string_constant ["one"]
// CHECK-NEXT:      %[[N:.*]] = hlo.string_to_number %[[S]]
func.func @raising_op_stays() -> tensor<f32> {
  %0 = tpu.replicate() {n = 1 : i64} {
    %1 = tpu.outside_compilation "0" -> (tensor<f32>) {
      %2 = hlo.string_constant ["one"] : tensor<!hlo.string>
      %3 = hlo.string_to_number %2 : (tensor<!hlo.string>) -> tensor<f32>
      tpu.yield %3 : tensor<f32>
    }
    tpu.yield %1 : tensor<f32>
  }
  func.return %0 : tensor<f32>
}

// -----

// A string result that the device yields keeps its cluster (strings never
// live on the device); its value is folded.
// CHECK-LABEL: func @string_output_keeps_its_cluster
// CHECK:         tpu.outside_compilation "0" -> (tensor<!hlo.string>) {
// CHECK-NEXT:      %[[S:.*]] = hlo.string_constant ["7"]
// CHECK-NEXT:      tpu.yield %[[S]]
func.func @string_output_keeps_its_cluster() -> tensor<!hlo.string> {
  %0 = tpu.replicate() {n = 1 : i64} {
    %1 = tpu.outside_compilation "0" -> (tensor<!hlo.string>) {
      %2 = hlo.constant dense<7> : tensor<i32>
      %3 = hlo.string_format "{}"(%2) summarize = 3 : (tensor<i32>) -> tensor<!hlo.string>
      tpu.yield %3 : tensor<!hlo.string>
    }
    tpu.yield %1 : tensor<!hlo.string>
  }
  func.return %0 : tensor<!hlo.string>
}

// -----

// A host-only op of constants left on the device (before soft placement)
// folds; device arithmetic of constants is the runtime's to fold.
// CHECK-LABEL: func @host_only_op_on_the_device
// CHECK:         %[[N:.*]] = hlo.constant dense<2.500000e+00> : tensor<f32>
// CHECK-NEXT:    %[[ONE:.*]] = hlo.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %y = hlo.add %[[N]], %[[ONE]] : tensor<f32>
func.func @host_only_op_on_the_device() -> tensor<f32> {
  %0 = tpu.replicate() {n = 1 : i64} {
    %s = hlo.string_constant ["2.5"] : tensor<!hlo.string>
    %n = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
    %one = hlo.constant dense<1.000000e+00> : tensor<f32>
    %y = hlo.add %n, %one : tensor<f32>
    tpu.yield %y : tensor<f32>
  }
  func.return %0 : tensor<f32>
}

// -----

// A cluster in a loop body folds in place (the loop stays on the device).
// CHECK-LABEL: func @cluster_in_a_loop
// CHECK:         hlo.while
// CHECK-NOT:     tpu.outside_compilation
// CHECK:         hlo.constant dense<4> : tensor<i32>
func.func @cluster_in_a_loop(%a: tensor<i32>) -> tensor<i32> {
  %0 = tpu.replicate([%a] as %x: tensor<i32>) {n = 1 : i64} {
    %r = hlo.while (%i = %x) : tensor<i32> cond {
      %ten = hlo.constant dense<10> : tensor<i32>
      %p = hlo.compare LT, %i, %ten : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %p : tensor<i1>
    } do {
    ^bb0(%j: tensor<i32>):
      %step = tpu.outside_compilation "0" -> (tensor<i32>) {
        %two = hlo.constant dense<2> : tensor<i32>
        %four = hlo.multiply %two, %two : tensor<i32>
        tpu.yield %four : tensor<i32>
      }
      %n = hlo.add %j, %step : tensor<i32>
      hlo.return %n : tensor<i32>
    }
    tpu.yield %r : tensor<i32>
  }
  func.return %0 : tensor<i32>
}
