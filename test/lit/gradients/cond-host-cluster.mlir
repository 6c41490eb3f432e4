// The gradient of xtpu.cond over a branch with a host cluster, as
// xtpu.gradients(..., colocate_gradients_with_ops=True) traces it (see
// compiler/gradients_control_flow.py): a gradient hlo.if on the same predicate
// whose branch re-runs the forward cluster "0" as "0.uid.forward" and puts the
// gradient of its ops in the seed's cluster "0.uid". Cluster names stay unique,
// so tpu-outline-outside-compilation gives each its host function, with the
// send/recv inside the branch that runs it.
// RUN: xtpu-opt %s -p tpu-outline-outside-compilation | filecheck %s

// CHECK-LABEL: func.func @main
// CHECK:         hlo.if %[[P:.*]] -> (tensor<f32>) {
// CHECK:           tpu.send_to_host "host_compute_channel_0_args"
// CHECK:           tpu.recv_from_host "host_compute_channel_0_retvals"
// CHECK:         } else {
// CHECK:         hlo.if %[[P]] -> (tensor<f32>, tensor<f32>) {
// CHECK:           tpu.send_to_host "host_compute_channel_0.uid.forward_args"
// CHECK:           tpu.send_to_host "host_compute_channel_0.uid_args"
// CHECK:           tpu.recv_from_host "host_compute_channel_0.uid.forward_retvals"
// CHECK:           tpu.recv_from_host "host_compute_channel_0.uid_retvals"
// CHECK:         } else {
// CHECK-NOT:       tpu.send_to_host
// CHECK:         }
// CHECK:       func.func @host_0() attributes {tpu.outside_compilation_cluster = "0"}
// CHECK:       func.func @host_0_uid_forward() attributes {tpu.outside_compilation_cluster = "0.uid.forward"}
// CHECK:         hlo.multiply
// CHECK:         hlo.add
// CHECK:       func.func @host_0_uid() attributes {tpu.outside_compilation_cluster = "0.uid"}
// CHECK:         tpu.recv_at_host "host_compute_channel_0.uid_args" : tensor<f32>{{$}}
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_replica_inputs" {tpu.held} : tensor<f32>
// CHECK:         tpu.send_from_host "host_compute_channel_0.uid_retvals"
builtin.module {
  func.func @main(%arg0: tensor<f32>, %arg1: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
    %0, %1 = tpu.replicate([%arg0] as %input0: tensor<f32>, [%arg1] as %input1: tensor<f32>) {n = 1 : i64} {
      %2 = hlo.constant dense<0.000000e+00> : tensor<f32>
      %3 = hlo.compare GT, %input0, %2 : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %4 = hlo.if %3 -> (tensor<f32>) {
        %5 = tpu.outside_compilation "0" -> (tensor<f32>) {
          %6 = hlo.multiply %input0, %input0 : tensor<f32>
          %7 = hlo.constant dense<1.000000e+00> : tensor<f32>
          %8 = hlo.add %6, %7 : tensor<f32>
          tpu.yield %8 : tensor<f32>
        }
        %9 = hlo.multiply %5, %input1 : tensor<f32>
        hlo.return %9 : tensor<f32>
      } else {
        %10 = hlo.exponential %input0 : tensor<f32>
        %11 = hlo.multiply %10, %input1 : tensor<f32>
        hlo.return %11 : tensor<f32>
      }
      %12 = hlo.constant dense<1.000000e+00> : tensor<f32>
      %13, %14 = hlo.if %3 -> (tensor<f32>, tensor<f32>) {
        %15 = tpu.outside_compilation "0.uid.forward" -> (tensor<f32>) {
          %16 = hlo.multiply %input0, %input0 : tensor<f32>
          %17 = hlo.constant dense<1.000000e+00> : tensor<f32>
          %18 = hlo.add %16, %17 : tensor<f32>
          tpu.yield %18 : tensor<f32>
        }
        %19 = hlo.multiply %12, %input1 : tensor<f32>
        %20 = hlo.multiply %15, %12 : tensor<f32>
        %21, %22 = tpu.outside_compilation "0.uid" -> (tensor<f32>, tensor<f32>) {
          %23 = hlo.multiply %19, %input0 : tensor<f32>
          %24 = hlo.multiply %input0, %19 : tensor<f32>
          tpu.yield %23, %24 : tensor<f32>, tensor<f32>
        }
        %25 = hlo.add %21, %22 : tensor<f32>
        hlo.return %25, %20 : tensor<f32>, tensor<f32>
      } else {
        %26 = hlo.exponential %input0 : tensor<f32>
        %27 = hlo.multiply %12, %input1 : tensor<f32>
        %28 = hlo.multiply %26, %12 : tensor<f32>
        %29 = hlo.multiply %27, %26 : tensor<f32>
        hlo.return %29, %28 : tensor<f32>, tensor<f32>
      }
      tpu.yield %13, %14 : tensor<f32>, tensor<f32>
    }
    func.return %0, %1 : tensor<f32>, tensor<f32>
  }
}
