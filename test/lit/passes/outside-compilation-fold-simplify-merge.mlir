// Issue 31: outside compilation at the level of TF's bridge, through the
// default pipeline (xtpu.passes.DEFAULT_PIPELINE). Host clusters of constants
// fold to device constants (no host code); simplification before extraction
// makes a gradient cluster whose cotangent is `ones * w` a head cluster; a
// cluster that needs no device value joins the cluster it reads from. The
// inputs are what xtpu.lower(...).as_text() gives for the issue's programs.
// RUN: xtpu-opt %s --split-input-file -p tpu-pad-dynamic-shapes,tpu-fold-host-constants,hlo-canonicalize,tpu-mark-outside-compilation,tpu-extract-head-tail-outside-compilation,tpu-outline-outside-compilation,tpu-lower-cross-replica-sum,ccl-combine-all-reduce | filecheck %s
// Without soft placement, a host-only op of constants left on the device is
// folded before it is judged (TF's bridge also canonicalizes before
// mark-ops-for-outside-compilation); one on an input is still an error.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics -p 'tpu-fold-host-constants,hlo-canonicalize,tpu-mark-outside-compilation{allow-soft-placement=false}' | filecheck %s --check-prefix=NOSOFT

// outside_compilation(computation_with_string_ops, 1): TF's bridge gives
// Const 11; so does xtpu, with no host function or host replicate.
// CHECK-LABEL: func @seed_string_example
// CHECK-NEXT:    %0, %1 = tpu.replicate() {n = 2 : i64} {
// CHECK-NEXT:      %[[C:.*]] = hlo.constant dense<1.100000e+01> : tensor<f32>
// CHECK-NEXT:      tpu.yield %[[C]] : tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
// CHECK-NOT:     host
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

// outside_compilation(lambda v: v * 3.0 + 1.0, constant(2.0)): Const 7.
// CHECK-LABEL: func @constant_cluster
// CHECK-NEXT:    %0, %1 = tpu.replicate() {n = 2 : i64} {
// CHECK-NEXT:      %[[C:.*]] = hlo.constant dense<7.000000e+00> : tensor<f32>
// CHECK-NEXT:      tpu.yield %[[C]] : tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
// CHECK-NOT:     host
func.func @constant_cluster() -> (tensor<f32>, tensor<f32>) {
  %0, %1 = tpu.replicate() {n = 2 : i64} {
    %2 = hlo.constant dense<2.000000e+00> : tensor<f32>
    %3 = tpu.outside_compilation "0" -> (tensor<f32>) {
      %4 = hlo.constant dense<3.000000e+00> : tensor<f32>
      %5 = hlo.multiply %2, %4 : tensor<f32>
      %6 = hlo.constant dense<1.000000e+00> : tensor<f32>
      %7 = hlo.add %5, %6 : tensor<f32>
      tpu.yield %7 : tensor<f32>
    }
    tpu.yield %3 : tensor<f32>
  }
  func.return %0, %1 : tensor<f32>, tensor<f32>
}

// -----

// gradients(reduce_sum(outside_compilation(lambda v: exp(v) * 2.0, x) * w), x)
// with colocation: the cotangent `ones * w` is w, a replica input, so the
// gradient cluster 0.uid runs in the head with cluster 0 and the program
// has no device<->host transfer at all (TF: the same).
// CHECK-LABEL: func @gradient_cluster_in_the_head
// CHECK-NEXT:    %0, %1 = tpu.replicate([%arg0, %arg1] as %[[X:.*]]: tensor<2xf32>, [%arg2, %arg3] as %[[W:.*]]: tensor<2xf32>) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "0,0.uid"} {
// CHECK-NEXT:      %[[E:.*]] = hlo.exponential %[[X]]
// CHECK-NEXT:      %[[TWO:.*]] = hlo.constant dense<2.000000e+00> : tensor<2xf32>
// CHECK:           %[[G1:.*]] = hlo.multiply %[[W]], %[[TWO]]
// CHECK-NEXT:      %[[G:.*]] = hlo.multiply %[[G1]], %[[E]]
// CHECK-NEXT:      tpu.yield %[[G]]
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %0, %1
// CHECK-NOT:     tpu.send_to_host
// CHECK-NOT:     tpu.recv_from_host
func.func @gradient_cluster_in_the_head(%arg0: tensor<2xf32>, %arg1: tensor<2xf32>, %arg2: tensor<2xf32>, %arg3: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %0, %1 = tpu.replicate([%arg0, %arg1] as %input0: tensor<2xf32>, [%arg2, %arg3] as %input1: tensor<2xf32>) {n = 2 : i64} {
    %2, %3, %4 = tpu.outside_compilation "0" -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
      %5 = hlo.exponential %input0 : tensor<2xf32>
      %6 = hlo.constant dense<2.000000e+00> : tensor<f32>
      %7 = hlo.broadcast_in_dim %6, dims = [] : (tensor<f32>) -> tensor<2xf32>
      %8 = hlo.multiply %5, %7 : tensor<2xf32>
      tpu.yield %8, %5, %7 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
    }
    %9 = hlo.multiply %2, %input1 : tensor<2xf32>
    %10 = hlo.constant dense<0.000000e+00> : tensor<f32>
    %11 = hlo.reduce(%9 init : %10) applies add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
    %12 = hlo.constant dense<1.000000e+00> : tensor<f32>
    %13 = hlo.broadcast_in_dim %12, dims = [] : (tensor<f32>) -> tensor<2xf32>
    %14 = hlo.multiply %13, %input1 : tensor<2xf32>
    %15 = tpu.outside_compilation "0.uid" -> (tensor<2xf32>) {
      %16 = hlo.multiply %14, %4 : tensor<2xf32>
      %17 = hlo.multiply %16, %3 : tensor<2xf32>
      tpu.yield %17 : tensor<2xf32>
    }
    tpu.yield %15 : tensor<2xf32>
  }
  func.return %0, %1 : tensor<2xf32>, tensor<2xf32>
}

// -----

// The same with the forward cluster on a device value (x * 0.5): TF's
// bridge moves w * 2 to the head and puts the rest with the forward cluster
// in one host launch; the device has two host computes, one sends x * 0.5
// and receives nothing, one sends nothing and receives the gradient
// (test/data/tf_bridge/). xtpu: the gradient cluster needs no device value,
// so it joins cluster 0; one send (x * 0.5) and one receive (the gradient);
// the forward value is dead on the device.
// CHECK-LABEL: func @gradient_cluster_joins_the_forward_cluster
// CHECK:         tpu.replicate({{.*}}) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "replica_inputs"}
// CHECK:         tpu.replicate([%arg0, %arg1] as %[[X:.*]]: tensor<2xf32>) {n = 2 : i64} {
// CHECK:           %[[H:.*]] = hlo.multiply %[[X]],
// CHECK-NEXT:      tpu.send_to_host "host_compute_channel_0_args"(%[[H]] : tensor<2xf32>)
// CHECK-NEXT:      %[[G:.*]] = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<2xf32>
// CHECK-NEXT:      %[[GX:.*]] = hlo.multiply %[[G]],
// CHECK-NEXT:      tpu.yield %[[GX]]
// CHECK-NEXT:    }
// CHECK-NOT:     tpu.send_to_host
// CHECK-NOT:     tpu.recv_from_host
// CHECK-NOT:     0.uid
// CHECK:       func.func @host_0() attributes {tpu.outside_compilation_cluster = "0"} {
// CHECK-NEXT:    %[[A:.*]] = tpu.recv_at_host "host_compute_channel_0_args" : tensor<2xf32>
// CHECK-NEXT:    %[[W:.*]] = tpu.recv_at_host "host_compute_channel_replica_inputs" {tpu.held} : tensor<2xf32>
// CHECK-NEXT:    %[[E:.*]] = hlo.exponential %[[A]]
// CHECK:         %[[G1:.*]] = hlo.multiply %[[W]],
// CHECK-NEXT:    %[[G2:.*]] = hlo.multiply %[[G1]], %[[E]]
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_retvals"(%[[G2]] : tensor<2xf32>)
// CHECK-NEXT:    func.return
func.func @gradient_cluster_joins_the_forward_cluster(%arg0: tensor<2xf32>, %arg1: tensor<2xf32>, %arg2: tensor<2xf32>, %arg3: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %0, %1 = tpu.replicate([%arg0, %arg1] as %input0: tensor<2xf32>, [%arg2, %arg3] as %input1: tensor<2xf32>) {n = 2 : i64} {
    %2 = hlo.constant dense<5.000000e-01> : tensor<f32>
    %3 = hlo.broadcast_in_dim %2, dims = [] : (tensor<f32>) -> tensor<2xf32>
    %4 = hlo.multiply %input0, %3 : tensor<2xf32>
    %5, %6, %7 = tpu.outside_compilation "0" -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
      %8 = hlo.exponential %4 : tensor<2xf32>
      %9 = hlo.constant dense<2.000000e+00> : tensor<f32>
      %10 = hlo.broadcast_in_dim %9, dims = [] : (tensor<f32>) -> tensor<2xf32>
      %11 = hlo.multiply %8, %10 : tensor<2xf32>
      tpu.yield %11, %8, %10 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
    }
    %12 = hlo.multiply %5, %input1 : tensor<2xf32>
    %13 = hlo.constant dense<0.000000e+00> : tensor<f32>
    %14 = hlo.reduce(%12 init : %13) applies add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
    %15 = hlo.constant dense<1.000000e+00> : tensor<f32>
    %16 = hlo.broadcast_in_dim %15, dims = [] : (tensor<f32>) -> tensor<2xf32>
    %17 = hlo.multiply %16, %input1 : tensor<2xf32>
    %18 = tpu.outside_compilation "0.uid" -> (tensor<2xf32>) {
      %19 = hlo.multiply %17, %7 : tensor<2xf32>
      %20 = hlo.multiply %19, %6 : tensor<2xf32>
      tpu.yield %20 : tensor<2xf32>
    }
    %21 = hlo.multiply %18, %3 : tensor<2xf32>
    tpu.yield %21 : tensor<2xf32>
  }
  func.return %0, %1 : tensor<2xf32>, tensor<2xf32>
}

// -----

// CHECK-LABEL: func @string_constant_parsed_on_the_device
// CHECK:         %[[C:.*]] = hlo.constant dense<2.500000e+00> : tensor<f32>
// CHECK-NEXT:    %y = hlo.multiply %x, %[[C]]
// CHECK-NOT:     hlo.string
// NOSOFT-LABEL: func @string_constant_parsed_on_the_device
// NOSOFT-NOT:   cannot run on the device
// NOSOFT:       hlo.constant dense<2.500000e+00>
func.func @string_constant_parsed_on_the_device(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %s = hlo.string_constant ["2.5"] : tensor<!hlo.string> loc("train.py":4:3)
    %n = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32> loc("train.py":5:3)
    %y = hlo.multiply %x, %n : tensor<f32>
    tpu.yield %y : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// With soft placement the string ops of the input go to the host (a head).
// CHECK-LABEL: func @string_of_an_input
// CHECK:         tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "auto0"}
// CHECK-NEXT:      hlo.string_format "{}"(%x)
// NOSOFT: 'hlo.string_format' op cannot run on the device (at train.py:9): it has string values; place it in outside_compilation or allow soft placement
func.func @string_of_an_input(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %f = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string> loc("train.py":9:3)
    %n = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32> loc("train.py":10:3)
    tpu.yield %n : tensor<f32>
  }
  func.return %r : tensor<f32>
}
