// Gradient clusters of the seed patch (outside_compilation_patch.diff.txt):
// the gradient of an op of cluster C, taken with colocation, is traced into
// cluster C.<gradient_uid>; a later gradient of that gradient goes to
// C.<uid1>.<uid2>. The passes treat them as any other cluster: each becomes
// its own host function with channels keyed by the full cluster name, and
// values flow host to host between them. The input is what
// xtpu.lower(...).as_text() gives for d/dx and d2/dx2 of exp(x) computed on
// the host with nested GradientTapes.
// RUN: xtpu-opt %s --split-input-file -p tpu-extract-head-tail-outside-compilation | filecheck %s --check-prefix=HEADTAIL
// RUN: xtpu-opt %s --split-input-file -p tpu-outline-outside-compilation | filecheck %s

// With no device op between them, all four clusters form one head
// computation on the host that keeps every cluster's name.
// HEADTAIL-LABEL: func @second_order_gradient_clusters
// HEADTAIL:         tpu.replicate({{.*}}) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "0,0.uid,0.uid.uid_1,0.uid_1"}
// HEADTAIL-NEXT:      hlo.constant
// HEADTAIL-NEXT:      hlo.constant
// HEADTAIL-NEXT:      hlo.exponential

// CHECK-LABEL: func @second_order_gradient_clusters
// CHECK-NOT:     tpu.outside_compilation "
// CHECK:         func.return
// CHECK-DAG:   func.func @host_0() attributes {tpu.outside_compilation_cluster = "0"}
// CHECK-DAG:   func.func @host_0_uid() attributes {tpu.outside_compilation_cluster = "0.uid"}
// CHECK-DAG:   func.func @host_0_uid_uid_1() attributes {tpu.outside_compilation_cluster = "0.uid.uid_1"}
// CHECK-DAG:   func.func @host_0_uid_1() attributes {tpu.outside_compilation_cluster = "0.uid_1"}
// CHECK-DAG:     tpu.send_from_host "host_compute_channel_0.uid_retvals"
// CHECK-DAG:     tpu.send_from_host "host_compute_channel_0.uid_1_retvals"
// CHECK-DAG:     tpu.recv_at_host "host_compute_channel_0_to_0.uid"
// CHECK-DAG:     tpu.recv_at_host "host_compute_channel_0.uid.uid_1_to_0.uid_1"
func.func @second_order_gradient_clusters(%arg0: tensor<f32>, %arg1: tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) {
  %0, %1, %2, %3 = tpu.replicate([%arg0, %arg1] as %input0: tensor<f32>) {n = 2 : i64} {
    %4 = tpu.outside_compilation "0" -> (tensor<f32>) {
      %5 = hlo.exponential %input0 : tensor<f32>
      tpu.yield %5 : tensor<f32>
    }
    %6 = hlo.constant dense<1.000000e+00> : tensor<f32>
    %7 = tpu.outside_compilation "0.uid" -> (tensor<f32>) {
      %8 = hlo.multiply %6, %4 : tensor<f32>
      tpu.yield %8 : tensor<f32>
    }
    %9 = hlo.constant dense<1.000000e+00> : tensor<f32>
    %10 = tpu.outside_compilation "0.uid.uid_1" -> (tensor<f32>) {
      %12 = hlo.multiply %6, %9 : tensor<f32>
      tpu.yield %12 : tensor<f32>
    }
    %13 = tpu.outside_compilation "0.uid_1" -> (tensor<f32>) {
      %14 = hlo.multiply %10, %4 : tensor<f32>
      tpu.yield %14 : tensor<f32>
    }
    tpu.yield %7, %13 : tensor<f32>, tensor<f32>
  }
  func.return %0, %1, %2, %3 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
}

// -----

// The gradient of a host op whose cotangent comes from the device: the
// device sends the cotangent on the gradient cluster's own channel and waits
// for the input's cotangent on its retvals channel.
// With nothing on the device after it, the gradient cluster is a tail
// computation, like any cluster (tpu-extract-head-tail-outside-compilation).
// HEADTAIL-LABEL: func @first_order_gradient_cluster
// HEADTAIL:         tpu.replicate({{.*}}) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "0"}
// HEADTAIL:         tpu.replicate
// HEADTAIL:         tpu.replicate({{.*}}) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "0.uid"}
// The host has the replica input (it is not sent), and the result, an
// output only, stays on the host until a host replicate returns it.
// CHECK-LABEL: func @first_order_gradient_cluster
// CHECK:         tpu.send_to_host "host_compute_channel_0_args"{{$}}
// CHECK:         %[[F:.*]] = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
// CHECK:         %[[CT:.*]] = hlo.multiply %[[F]], %[[F]]
// CHECK:         tpu.send_to_host "host_compute_channel_0.uid_args"(%[[CT]] : tensor<f32>)
// CHECK:         tpu.recv_from_host "host_compute_channel_0.uid_retvals"{{$}}
// CHECK:         %[[R:.*]] = tpu.replicate() {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "0.uid"}
// CHECK-NEXT:      tpu.recv_at_host "host_compute_channel_0.uid_held" {tpu.held} : tensor<f32>
// CHECK:         func.return %[[R]]
// CHECK-LABEL: func.func @host_0_uid() attributes {tpu.outside_compilation_cluster = "0.uid"}
// CHECK-NEXT:    %[[C:.*]] = tpu.recv_at_host "host_compute_channel_0.uid_args" : tensor<f32>
// CHECK-NEXT:    %[[E:.*]] = tpu.recv_at_host "host_compute_channel_0_to_0.uid" : tensor<f32>
// CHECK-NEXT:    %[[G:.*]] = hlo.multiply %[[C]], %[[E]]
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0.uid_held"(%[[G]] : tensor<f32>) {tpu.held}
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0.uid_retvals"{{$}}
func.func @first_order_gradient_cluster(%a: tensor<f32>) -> (tensor<f32>) {
  %r = tpu.replicate([%a] as %input0: tensor<f32>) {n = 1 : i64} {
    %e = tpu.outside_compilation "0" -> (tensor<f32>) {
      %x = hlo.exponential %input0 : tensor<f32>
      tpu.yield %x : tensor<f32>
    }
    %ct = hlo.multiply %e, %e : tensor<f32>
    %g = tpu.outside_compilation "0.uid" -> (tensor<f32>) {
      %m = hlo.multiply %ct, %e : tensor<f32>
      tpu.yield %m : tensor<f32>
    }
    tpu.yield %g : tensor<f32>
  }
  func.return %r : tensor<f32>
}
