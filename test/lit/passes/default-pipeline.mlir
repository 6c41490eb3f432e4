// The default pipeline (xtpu.passes.DEFAULT_PIPELINE) on a traced module:
// soft placement, head and tail clusters to the host, outlining, then the
// collectives. The print of the input runs before the device program, the
// print of the loss after it; cluster "0" stays in the middle, and the device
// squares %g while the host reduces it.
// RUN: xtpu-opt %s -p tpu-mark-outside-compilation,tpu-extract-head-tail-outside-compilation,tpu-outline-outside-compilation,tpu-lower-cross-replica-sum,ccl-combine-all-reduce | filecheck %s

// CHECK-LABEL: func @main
// CHECK-NEXT:    tpu.replicate([%a, %b] as %[[HX:.*]]: tensor<2xf32>) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "auto0"} {
// CHECK-NEXT:      %[[T:.*]] = hlo.string_constant ["step"]
// CHECK-NEXT:      hlo.print(%[[T]], %[[HX]])
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %r, %r_1, %r_2, %r_3, %[[L0:.*]], %[[L1:.*]] = tpu.replicate([%a, %b] as %[[X:.*]]: tensor<2xf32>) {n = 2 : i64} {
// CHECK-NEXT:      %[[G:.*]] = ccl.all_reduce %[[X]] applies add groups = dense<{{\[\[}}0, 1{{\]\]}}> : tensor<1x2xi64> channel 1 : tensor<2xf32>
// CHECK-NEXT:      tpu.send_to_host "host_compute_channel_0_args"(%[[G]] : tensor<2xf32>)
// CHECK-NEXT:      %[[U:.*]] = hlo.multiply %[[G]], %[[G]]
// CHECK-NEXT:      %[[L:.*]] = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
// CHECK-NEXT:      %[[L2:.*]] = hlo.multiply %[[L]], %[[L]]
// CHECK-NEXT:      tpu.yield %[[U]], %[[L2]], %[[L]]
// CHECK-NEXT:    }
// CHECK-NEXT:    tpu.replicate([%[[L0]], %[[L1]]] as %[[TL:.*]]: tensor<f32>) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "auto1"} {
// CHECK-NEXT:      %[[T2:.*]] = hlo.string_constant ["step"]
// CHECK-NEXT:      %[[F:.*]] = hlo.string_format "loss={}"(%[[TL]])
// CHECK-NEXT:      hlo.print(%[[T2]], %[[F]])
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r, %r_1, %r_2, %r_3
// CHECK-NOT:     hlo.string
// CHECK-NOT:     tpu.cross_replica_sum
// CHECK-LABEL: func @host_0() attributes {tpu.outside_compilation_cluster = "0"}
// CHECK-NEXT:    %[[HG:.*]] = tpu.recv_at_host "host_compute_channel_0_args" : tensor<2xf32>
// CHECK-NEXT:    %[[Z:.*]] = hlo.constant dense<0.000000e+00>
// CHECK-NEXT:    %[[S:.*]] = hlo.reduce(%[[HG]] init : %[[Z]])
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_retvals"(%[[S]] : tensor<f32>)
// CHECK-NEXT:    func.return
func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<f32>) {
  %r:4 = tpu.replicate([%a, %b] as %x: tensor<2xf32>) {n = 2 : i64} {
    %tag = hlo.string_constant ["step"] : tensor<!hlo.string>
    hlo.print (%tag, %x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>, tensor<2xf32>
    %g = tpu.cross_replica_sum %x : tensor<2xf32>
    %zero = hlo.constant dense<0.0> : tensor<f32>
    %loss = tpu.outside_compilation "0" -> (tensor<f32>) {
      %s = hlo.reduce(%g init: %zero) applies add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
      tpu.yield %s : tensor<f32>
    }
    %f = hlo.string_format "loss={}" (%loss) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
    hlo.print (%tag, %f) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>, tensor<!hlo.string>
    %u = hlo.multiply %g, %g : tensor<2xf32>
    %l2 = hlo.multiply %loss, %loss : tensor<f32>
    tpu.yield %u, %l2 : tensor<2xf32>, tensor<f32>
  }
  func.return %r#0, %r#1, %r#2, %r#3 : tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<f32>
}
