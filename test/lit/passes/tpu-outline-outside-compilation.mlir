// tpu-outline-outside-compilation: TF's tf-extract-outside-compilation. Each
// cluster C becomes func @host_C (recv_at_host, the cluster's ops,
// send_from_host); the device sends the cluster's inputs and waits for its
// results on the channels host_compute_channel_C_args / _retvals, sending as
// early and receiving as late as the block allows. Constants (and what only
// they compute) are recomputed on the host; a value one cluster hands to a
// later one of the same block goes host to host on
// host_compute_channel_A_to_B. Clusters in hlo.if / hlo.while regions get
// their send/recv inside the region. The host has the replica inputs: a host
// replicate before the device program keeps the ones host code uses
// (host_compute_channel_replica_inputs, tpu.held), and the device never sends
// them. Values a cluster in a nested block or the outputs need are kept on
// the host too (host_compute_channel_C_held). The device program loses the
// inputs and outputs it does not compute with.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics -p tpu-outline-outside-compilation | filecheck %s
// Nested clusters do not verify, so the pass sees them only without the verifier.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics --disable-verify -p tpu-outline-outside-compilation | filecheck %s --check-prefix=NESTED

// CHECK-LABEL: func @no_clusters_no_host_functions
// CHECK-NOT:   tpu.send_to_host
// CHECK-NOT:   func @host_
func.func @no_clusters_no_host_functions(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %y = hlo.negate %x : tensor<f32>
    tpu.yield
  }
  func.return
}

// -----

// The device sends the captured values it computes, in order of first use,
// and receives the yielded ones; the host has the replica input %x (TF's
// mixed_input_single_outside_compilation); the host function keeps the
// cluster's ops in order.
// CHECK-LABEL: func @cluster_with_inputs_and_outputs
// CHECK:         %y = hlo.negate %x
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_0_args"(%y : tensor<f32>)
// CHECK-NEXT:    %n = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
// CHECK-NEXT:    %z = hlo.add %n, %y
// CHECK-NOT:     tpu.outside_compilation
// CHECK-LABEL: func @host_0() attributes {tpu.outside_compilation_cluster = "0"} {
// CHECK-NEXT:    %[[Y:.*]] = tpu.recv_at_host "host_compute_channel_0_args" : tensor<f32>
// CHECK-NEXT:    %[[X:.*]] = tpu.recv_at_host "host_compute_channel_replica_inputs" {tpu.held} : tensor<f32>
// CHECK-NEXT:    %[[F:.*]] = hlo.string_format "{}"(%[[Y]])
// CHECK-NEXT:    %[[M:.*]] = hlo.string_to_number %[[F]]
// CHECK-NEXT:    %[[S:.*]] = hlo.add %[[M]], %[[X]]
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_retvals"(%[[S]] : tensor<f32>)
// CHECK-NEXT:    func.return
func.func @cluster_with_inputs_and_outputs(%a: tensor<f32>, %b: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = 2 : i64} {
    %y = hlo.negate %x : tensor<f32>
    %n = tpu.outside_compilation "0" -> (tensor<f32>) {
      %f = hlo.string_format "{}" (%y) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      %m = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32>
      %s = hlo.add %m, %x : tensor<f32>
      tpu.yield %s : tensor<f32>
    }
    %z = hlo.add %n, %y : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r#0, %r#1 : tensor<f32>, tensor<f32>
}

// -----

// Both pairs are emitted even when empty: the per-execution handshake.
// CHECK-LABEL: func @cluster_without_inputs_or_outputs_still_handshakes
// CHECK:         tpu.send_to_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    tpu.recv_from_host "host_compute_channel_0_retvals"{{$}}
// CHECK-NEXT:    tpu.yield
// CHECK-LABEL: func @host_0()
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    %s = hlo.string_constant ["hello"]
// CHECK-NEXT:    hlo.print(%s)
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_retvals"{{$}}
// CHECK-NEXT:    func.return
func.func @cluster_without_inputs_or_outputs_still_handshakes() {
  tpu.replicate() {n = 2 : i64} {
    tpu.outside_compilation "0" {
      %s = hlo.string_constant ["hello"] : tensor<!hlo.string>
      hlo.print (%s) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>
      tpu.yield
    }
    tpu.yield
  }
  func.return
}

// -----

// Constants go to the host directly; on the device only the ones device ops
// still use remain. Nothing uses the (empty) results: the recv, the
// handshake, waits at the end of the block.
// CHECK-LABEL: func @captured_constants_are_copied_not_sent
// CHECK:         tpu.replicate([%a] as %x
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    %c = hlo.constant dense<2.000000e+00>
// CHECK-NEXT:    %y = hlo.multiply %x, %c
// CHECK-NEXT:    tpu.recv_from_host "host_compute_channel_0_retvals"{{$}}
// CHECK-NEXT:    tpu.yield %y
// CHECK-LABEL: func @host_0()
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    %[[X:.*]] = tpu.recv_at_host "host_compute_channel_replica_inputs" {tpu.held} : tensor<f32>
// CHECK-NEXT:    %[[FMT:.*]] = hlo.string_constant ["x="]
// CHECK-NEXT:    %[[C:.*]] = hlo.constant dense<2.000000e+00>
// CHECK-NEXT:    %[[H:.*]] = hlo.constant dense<3.000000e+00>
// CHECK-NEXT:    hlo.print(%[[FMT]], %[[X]], %[[C]], %[[H]])
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_retvals"
func.func @captured_constants_are_copied_not_sent(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %c = hlo.constant dense<2.0> : tensor<f32>
    %only_host = hlo.constant dense<3.0> : tensor<f32>
    %fmt = hlo.string_constant ["x="] : tensor<!hlo.string>
    tpu.outside_compilation "0" {
      hlo.print (%fmt, %x, %c, %only_host) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>, tensor<f32>, tensor<f32>, tensor<f32>
      tpu.yield
    }
    %y = hlo.multiply %x, %c : tensor<f32>
    tpu.yield %y : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// Values computed only from constants and the replica id are recomputed on
// the host too, never sent.
// CHECK-LABEL: func @values_computed_from_constants_are_recomputed
// CHECK:         tpu.send_to_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    %c = hlo.constant
// CHECK-NEXT:    %y = hlo.add %x, %c
// CHECK-NEXT:    tpu.recv_from_host "host_compute_channel_0_retvals"
// CHECK-NOT:     hlo.iota
// CHECK-LABEL: func @host_0()
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    %[[X:.*]] = tpu.recv_at_host "host_compute_channel_replica_inputs" {tpu.held} : tensor<2xf32>
// CHECK-NEXT:    %[[I:.*]] = hlo.iota dim = 0
// CHECK-NEXT:    %[[C:.*]] = hlo.constant dense<2.000000e+00>
// CHECK-NEXT:    %[[S:.*]] = hlo.multiply %[[I]], %[[C]]
// CHECK-NEXT:    %[[ID:.*]] = tpu.replica_id
// CHECK-NEXT:    hlo.print(%[[S]], %[[ID]], %[[X]])
func.func @values_computed_from_constants_are_recomputed(%a: tensor<2xf32>) -> tensor<2xf32> {
  %r = tpu.replicate([%a] as %x: tensor<2xf32>) {n = 1 : i64} {
    %i = hlo.iota dim = 0 : tensor<2xf32>
    %c = hlo.constant dense<2.0> : tensor<2xf32>
    %s = hlo.multiply %i, %c : tensor<2xf32>
    %id = tpu.replica_id : tensor<i32>
    tpu.outside_compilation "0" {
      hlo.print (%s, %id, %x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<2xf32>, tensor<i32>, tensor<2xf32>
      tpu.yield
    }
    %y = hlo.add %x, %c : tensor<2xf32>
    tpu.yield %y : tensor<2xf32>
  }
  func.return %r : tensor<2xf32>
}

// -----

// Cluster 1's result is only an output: the host keeps it and a host
// replicate after the device program returns it; the device program then
// needs no input and yields nothing.
// CHECK-LABEL: func @two_clusters_in_order
// CHECK:         tpu.replicate() {n = 1 : i64} {
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    %p = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
// CHECK-NEXT:    %q = hlo.negate %p
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_1_args"(%q : tensor<f32>)
// CHECK-NEXT:    tpu.recv_from_host "host_compute_channel_1_retvals"{{$}}
// CHECK-NEXT:    tpu.yield{{$}}
// CHECK:         %r = tpu.replicate() {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "1"} {
// CHECK-NEXT:      %s = tpu.recv_at_host "host_compute_channel_1_held" {tpu.held} : tensor<f32>
// CHECK-NEXT:      tpu.yield %s
// CHECK:         func.return %r
// CHECK-LABEL: func @host_0() attributes {tpu.outside_compilation_cluster = "0"}
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_0_args"
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_replica_inputs"
// CHECK-NEXT:    hlo.exponential
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_retvals"
// CHECK-LABEL: func @host_1() attributes {tpu.outside_compilation_cluster = "1"}
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_1_args"
// CHECK-NEXT:    hlo.tanh
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_1_held"
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_1_retvals"{{$}}
func.func @two_clusters_in_order(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %p = tpu.outside_compilation "0" -> (tensor<f32>) {
      %e = hlo.exponential %x : tensor<f32>
      tpu.yield %e : tensor<f32>
    }
    %q = hlo.negate %p : tensor<f32>
    %s = tpu.outside_compilation "1" -> (tensor<f32>) {
      %t = hlo.tanh %q : tensor<f32>
      tpu.yield %t : tensor<f32>
    }
    tpu.yield %s : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// Send early, receive late: the send follows the last definition of its
// operands, the recv precedes the first use of a result, and the device
// computes %t and %u while the host runs the cluster.
// CHECK-LABEL: func @send_early_recv_late
// CHECK:         %y = hlo.negate %x
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_0_args"(%y : tensor<f32>)
// CHECK-NEXT:    %e = hlo.exponential %x
// CHECK-NEXT:    %t = hlo.tanh %e
// CHECK-NEXT:    %u = hlo.multiply %t, %t
// CHECK-NEXT:    %n = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
// CHECK-NEXT:    %z = hlo.add %n, %u
func.func @send_early_recv_late(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %y = hlo.negate %x : tensor<f32>
    %e = hlo.exponential %x : tensor<f32>
    %n = tpu.outside_compilation "0" -> (tensor<f32>) {
      %f = hlo.string_format "{}" (%y) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      %m = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32>
      tpu.yield %m : tensor<f32>
    }
    %t = hlo.tanh %e : tensor<f32>
    %u = hlo.multiply %t, %t : tensor<f32>
    %z = hlo.add %n, %u : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// Points follow the values, not the clusters' order: cluster 1 needs only
// %x, which the host has, so it is sent first; cluster 0's result is received before the hlo.if
// whose region uses it, cluster 1's before its first user.
// CHECK-LABEL: func @send_and_recv_points_follow_the_values
// CHECK:         tpu.replicate([%a] as %x
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_1_args"{{$}}
// CHECK-NEXT:    %y = hlo.exponential %x
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_0_args"(%y : tensor<f32>)
// CHECK-NEXT:    %w = hlo.log %x
// CHECK-NEXT:    %u = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
// CHECK-NEXT:    %z = hlo.if %p
// CHECK:         %v = tpu.recv_from_host "host_compute_channel_1_retvals" : tensor<f32>
// CHECK-NEXT:    %q = hlo.add %z, %v
func.func @send_and_recv_points_follow_the_values(%a: tensor<f32>, %b: tensor<i1>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>, [%b] as %p: tensor<i1>) {n = 1 : i64} {
    %y = hlo.exponential %x : tensor<f32>
    %u = tpu.outside_compilation "0" -> (tensor<f32>) {
      %t = hlo.tanh %y : tensor<f32>
      tpu.yield %t : tensor<f32>
    }
    %v = tpu.outside_compilation "1" -> (tensor<f32>) {
      %t = hlo.negate %x : tensor<f32>
      tpu.yield %t : tensor<f32>
    }
    %w = hlo.log %x : tensor<f32>
    %z = hlo.if %p -> (tensor<f32>) {
      %s = hlo.add %u, %w : tensor<f32>
      hlo.return %s : tensor<f32>
    } else {
      hlo.return %w : tensor<f32>
    }
    %q = hlo.add %z, %v : tensor<f32>
    tpu.yield %q : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// Clusters with side effects keep their order: cluster 2 is sent only after
// cluster 0 has answered. Cluster 1 has none: it is sent at the start, in the
// clusters' order, and its result goes host to host to cluster 2.
// CHECK-LABEL: func @side_effects_keep_their_order
// CHECK:         tpu.replicate([%a] as %x
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_1_args"{{$}}
// CHECK-NEXT:    %y = hlo.negate %x
// CHECK-NEXT:    tpu.recv_from_host "host_compute_channel_0_retvals"
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_2_args"(%y : tensor<f32>)
// CHECK-NEXT:    tpu.recv_from_host "host_compute_channel_1_retvals"
// CHECK-NEXT:    tpu.recv_from_host "host_compute_channel_2_retvals"
// CHECK-NEXT:    tpu.yield
func.func @side_effects_keep_their_order(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    tpu.outside_compilation "0" {
      hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      tpu.yield
    }
    %y = hlo.negate %x : tensor<f32>
    %p = tpu.outside_compilation "1" -> (tensor<f32>) {
      %e = hlo.exponential %x : tensor<f32>
      tpu.yield %e : tensor<f32>
    }
    tpu.outside_compilation "2" {
      hlo.print (%y, %p) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>, tensor<f32>
      tpu.yield
    }
    tpu.yield
  }
  func.return
}

// -----

// Results used only on the host go host to host (the string always does);
// %k goes both to cluster 1 and, since the device adds it, to the device.
// CHECK-LABEL: func @host_to_host_values
// CHECK:         tpu.send_to_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    %y = hlo.negate %x
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_1_args"(%y : tensor<f32>)
// CHECK-NEXT:    %k = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>{{$}}
// CHECK-NEXT:    %q = tpu.recv_from_host "host_compute_channel_1_retvals" : tensor<f32>
// CHECK-NEXT:    %z = hlo.add %q, %k
// CHECK-LABEL: func @host_0()
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    %[[X:.*]] = tpu.recv_at_host "host_compute_channel_replica_inputs" {tpu.held} : tensor<f32>
// CHECK-NEXT:    %[[F:.*]] = hlo.string_format "x={}"(%[[X]])
// CHECK-NEXT:    %[[M:.*]] = hlo.string_to_number %[[F]]
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_to_1"(%[[F]], %[[M]] : tensor<!hlo.string>, tensor<f32>)
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_retvals"(%[[M]] : tensor<f32>)
// CHECK-LABEL: func @host_1()
// CHECK-NEXT:    %[[Y:.*]] = tpu.recv_at_host "host_compute_channel_1_args" : tensor<f32>
// CHECK-NEXT:    %[[S:.*]], %[[K:.*]] = tpu.recv_at_host "host_compute_channel_0_to_1" : tensor<!hlo.string>, tensor<f32>
// CHECK-NEXT:    hlo.print(%[[S]], %[[K]], %[[Y]])
// CHECK-NEXT:    %[[Q:.*]] = hlo.add %[[K]], %[[Y]]
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_1_retvals"(%[[Q]] : tensor<f32>)
func.func @host_to_host_values(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %s, %k = tpu.outside_compilation "0" -> (tensor<!hlo.string>, tensor<f32>) {
      %f = hlo.string_format "x={}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      %m = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32>
      tpu.yield %f, %m : tensor<!hlo.string>, tensor<f32>
    }
    %y = hlo.negate %x : tensor<f32>
    %q = tpu.outside_compilation "1" -> (tensor<f32>) {
      hlo.print (%s, %k, %y) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>, tensor<f32>, tensor<f32>
      %q1 = hlo.add %k, %y : tensor<f32>
      tpu.yield %q1 : tensor<f32>
    }
    %z = hlo.add %q, %k : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A cluster in a branch runs on the host exactly when the branch runs: its
// send/recv stay in the branch; the host function is as usual.
// CHECK-LABEL: func @clusters_in_both_branches_of_if
// CHECK:         %y = hlo.if %p -> (tensor<f32>) {
// CHECK-NEXT:      tpu.send_to_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:      %t = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
// CHECK-NEXT:      hlo.return %t
// CHECK-NEXT:    } else {
// CHECK-NEXT:      tpu.send_to_host "host_compute_channel_1_args"{{$}}
// CHECK-NEXT:      tpu.recv_from_host "host_compute_channel_1_retvals"{{$}}
// CHECK-NEXT:      hlo.return %x
// CHECK-LABEL: func @host_0()
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_0_args"
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_replica_inputs"
// CHECK-NEXT:    hlo.exponential
// CHECK-LABEL: func @host_1()
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_1_args"
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_replica_inputs"
// CHECK-NEXT:    hlo.print
func.func @clusters_in_both_branches_of_if(%a: tensor<f32>, %b: tensor<i1>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>, [%b] as %p: tensor<i1>) {n = 1 : i64} {
    %y = hlo.if %p -> (tensor<f32>) {
      %t = tpu.outside_compilation "0" -> (tensor<f32>) {
        %e = hlo.exponential %x : tensor<f32>
        tpu.yield %e : tensor<f32>
      }
      hlo.return %t : tensor<f32>
    } else {
      tpu.outside_compilation "1" {
        hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
        tpu.yield
      }
      hlo.return %x : tensor<f32>
    }
    tpu.yield %y : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A cluster in a loop body runs once per iteration; it may use values from
// above the loop: %x, a replica input, the host reads on every iteration.
// CHECK-LABEL: func @cluster_in_while
// CHECK:         } do {
// CHECK-NEXT:    ^bb0(%i1: tensor<i32>, %v1: tensor<f32>):
// CHECK-NEXT:      tpu.send_to_host "host_compute_channel_0_args"(%v1 : tensor<f32>)
// CHECK-NEXT:      %one = hlo.constant dense<1>
// CHECK-NEXT:      %i2 = hlo.add %i1, %one
// CHECK-NEXT:      %v2 = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
// CHECK-NEXT:      hlo.return %i2, %v2
// CHECK-LABEL: func @host_0()
// CHECK-NEXT:    %[[V:.*]] = tpu.recv_at_host "host_compute_channel_0_args" : tensor<f32>
// CHECK-NEXT:    %[[X:.*]] = tpu.recv_at_host "host_compute_channel_replica_inputs" {tpu.held} : tensor<f32>
// CHECK-NEXT:    %[[S:.*]] = hlo.add %[[V]], %[[X]]
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_retvals"(%[[S]] : tensor<f32>)
func.func @cluster_in_while(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %z = hlo.constant dense<0> : tensor<i32>
    %w:2 = hlo.while(%i = %z, %v = %x) : tensor<i32>, tensor<f32> cond {
      %three = hlo.constant dense<3> : tensor<i32>
      %c = hlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %c : tensor<i1>
    } do {
    ^bb0(%i1: tensor<i32>, %v1: tensor<f32>):
      %one = hlo.constant dense<1> : tensor<i32>
      %v2 = tpu.outside_compilation "0" -> (tensor<f32>) {
        %s = hlo.add %v1, %x : tensor<f32>
        tpu.yield %s : tensor<f32>
      }
      %i2 = hlo.add %i1, %one : tensor<i32>
      hlo.return %i2, %v2 : tensor<i32>, tensor<f32>
    }
    tpu.yield %w#1 : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// CHECK-LABEL: func @if_in_while_and_while_in_if
// CHECK:         hlo.while
// CHECK:           %v2 = hlo.if %p -> (tensor<f32>) {
// CHECK-NEXT:        tpu.send_to_host "host_compute_channel_0_args"(%v1 : tensor<f32>)
// CHECK-NEXT:        %t = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
// CHECK-NEXT:        hlo.return %t
// CHECK:         %y = hlo.if %p -> (tensor<f32>) {
// CHECK:           hlo.while
// CHECK:           ^bb0(%j1: tensor<i32>, %s1: tensor<f32>):
// CHECK-NEXT:        tpu.send_to_host "host_compute_channel_1_args"(%j1, %s1 : tensor<i32>, tensor<f32>)
// CHECK-NEXT:        %{{.*}} = hlo.constant dense<1>
// CHECK-NEXT:        %j2 = hlo.add
// CHECK-NEXT:        tpu.recv_from_host "host_compute_channel_1_retvals"{{$}}
// CHECK-NEXT:        hlo.return %j2, %s1
// CHECK-LABEL: func @host_0()
// CHECK-LABEL: func @host_1()
func.func @if_in_while_and_while_in_if(%a: tensor<f32>, %b: tensor<i1>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>, [%b] as %p: tensor<i1>) {n = 1 : i64} {
    %z = hlo.constant dense<0> : tensor<i32>
    %w:2 = hlo.while(%i = %z, %v = %x) : tensor<i32>, tensor<f32> cond {
      %three = hlo.constant dense<3> : tensor<i32>
      %c = hlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %c : tensor<i1>
    } do {
    ^bb0(%i1: tensor<i32>, %v1: tensor<f32>):
      %one = hlo.constant dense<1> : tensor<i32>
      %i2 = hlo.add %i1, %one : tensor<i32>
      %v2 = hlo.if %p -> (tensor<f32>) {
        %t = tpu.outside_compilation "0" -> (tensor<f32>) {
          %e = hlo.exponential %v1 : tensor<f32>
          tpu.yield %e : tensor<f32>
        }
        hlo.return %t : tensor<f32>
      } else {
        hlo.return %v1 : tensor<f32>
      }
      hlo.return %i2, %v2 : tensor<i32>, tensor<f32>
    }
    %y = hlo.if %p -> (tensor<f32>) {
      %u:2 = hlo.while(%j = %z, %s = %w#1) : tensor<i32>, tensor<f32> cond {
        %two = hlo.constant dense<2> : tensor<i32>
        %d = hlo.compare LT, %j, %two : (tensor<i32>, tensor<i32>) -> tensor<i1>
        hlo.return %d : tensor<i1>
      } do {
      ^bb0(%j1: tensor<i32>, %s1: tensor<f32>):
        %one = hlo.constant dense<1> : tensor<i32>
        %j2 = hlo.add %j1, %one : tensor<i32>
        tpu.outside_compilation "1" {
          hlo.print (%j1, %s1) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<i32>, tensor<f32>
          tpu.yield
        }
        hlo.return %j2, %s1 : tensor<i32>, tensor<f32>
      }
      hlo.return %u#1 : tensor<f32>
    } else {
      hlo.return %x : tensor<f32>
    }
    tpu.yield %y : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// Host control flow: a cluster's hlo.if / hlo.while run in the host function.
// CHECK-LABEL: func @host_control_flow_in_a_cluster
// CHECK:         tpu.send_to_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    tpu.recv_from_host "host_compute_channel_0_retvals"{{$}}
// CHECK-NEXT:    tpu.yield{{$}}
// CHECK:         %r = tpu.replicate() {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "0"}
// CHECK-NEXT:      %y = tpu.recv_at_host "host_compute_channel_0_held" {tpu.held} : tensor<f32>
// CHECK-LABEL: func @host_0()
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_0_args"{{$}}
// CHECK-NEXT:    %[[X:.*]] = tpu.recv_at_host "host_compute_channel_replica_inputs" {tpu.held} : tensor<f32>
// CHECK:         %[[S:.*]] = hlo.if %{{.*}} -> (tensor<!hlo.string>) {
// CHECK-NEXT:      hlo.string_format "+{}"(%[[X]])
// CHECK:         } else {
// CHECK:         %[[N:.*]] = hlo.string_to_number %[[S]]
// CHECK-NEXT:    %[[M:.*]] = hlo.while(%{{.*}} = %[[N]]) : tensor<f32> cond {
// CHECK:           hlo.add %{{.*}}, %[[X]]
// CHECK:         tpu.send_from_host "host_compute_channel_0_held"(%[[M]] : tensor<f32>) {tpu.held}
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_retvals"{{$}}
func.func @host_control_flow_in_a_cluster(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %y = tpu.outside_compilation "0" -> (tensor<f32>) {
      %zero = hlo.constant dense<0.0> : tensor<f32>
      %pos = hlo.compare GT, %x, %zero : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %s = hlo.if %pos -> (tensor<!hlo.string>) {
        %f = hlo.string_format "+{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
        hlo.return %f : tensor<!hlo.string>
      } else {
        %f = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
        hlo.return %f : tensor<!hlo.string>
      }
      %n = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
      %m = hlo.while(%v = %n) : tensor<f32> cond {
        %ten = hlo.constant dense<10.0> : tensor<f32>
        %c = hlo.compare LT, %v, %ten : (tensor<f32>, tensor<f32>) -> tensor<i1>
        hlo.return %c : tensor<i1>
      } do {
      ^bb0(%v1: tensor<f32>):
        %v2 = hlo.add %v1, %x : tensor<f32>
        hlo.return %v2 : tensor<f32>
      }
      tpu.yield %m : tensor<f32>
    }
    tpu.yield %y : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A result that the device uses too reaches a cluster in a loop on the host,
// not back from the device (TF's
// outside_compiled_ops_with_multiple_region_single_cluster): the host keeps
// it, the device receives it before the loop.
// CHECK-LABEL: func @device_value_of_a_cluster_reaches_a_cluster_in_a_loop
// CHECK:         %k = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
// CHECK-NEXT:    hlo.while(%i = %z, %v = %k)
// CHECK:           tpu.send_to_host "host_compute_channel_1_args"(%v1 : tensor<f32>)
// CHECK-LABEL: func @host_0()
// CHECK:         tpu.send_from_host "host_compute_channel_0_held"(%[[E:.*]] : tensor<f32>) {tpu.held}
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_retvals"(%[[E]] : tensor<f32>)
// CHECK-LABEL: func @host_1()
// CHECK-NEXT:    %[[V:.*]] = tpu.recv_at_host "host_compute_channel_1_args" : tensor<f32>
// CHECK-NEXT:    %[[K:.*]] = tpu.recv_at_host "host_compute_channel_0_held" {tpu.held} : tensor<f32>
// CHECK-NEXT:    hlo.add %[[V]], %[[K]]
func.func @device_value_of_a_cluster_reaches_a_cluster_in_a_loop(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %k = tpu.outside_compilation "0" -> (tensor<f32>) {
      %e = hlo.exponential %x : tensor<f32>
      tpu.yield %e : tensor<f32>
    }
    %z = hlo.constant dense<0> : tensor<i32>
    %w:2 = hlo.while(%i = %z, %v = %k) : tensor<i32>, tensor<f32> cond {
      %three = hlo.constant dense<3> : tensor<i32>
      %c = hlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %c : tensor<i1>
    } do {
    ^bb0(%i1: tensor<i32>, %v1: tensor<f32>):
      %one = hlo.constant dense<1> : tensor<i32>
      %i2 = hlo.add %i1, %one : tensor<i32>
      %v2 = tpu.outside_compilation "1" -> (tensor<f32>) {
        %s = hlo.add %v1, %k : tensor<f32>
        tpu.yield %s : tensor<f32>
      }
      hlo.return %i2, %v2 : tensor<i32>, tensor<f32>
    }
    tpu.yield %w#1 : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// Gradient clusters "<cluster>.<uid>": the function name is an identifier,
// the channel keys keep the cluster's name.
// CHECK-LABEL: func @gradient_cluster_names_are_sanitized
// CHECK:         tpu.send_to_host "host_compute_channel_0.uid_3_args"
// CHECK-NEXT:    tpu.recv_from_host "host_compute_channel_0.uid_3_retvals"
// CHECK-LABEL: func @host_0_uid_3() attributes {tpu.outside_compilation_cluster = "0.uid_3"}
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_0.uid_3_args"
func.func @gradient_cluster_names_are_sanitized(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    tpu.outside_compilation "0.uid_3" {
      hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      tpu.yield
    }
    tpu.yield
  }
  func.return
}

// -----

// CHECK-LABEL: func @host_0() {
// CHECK-LABEL: func @host_function_names_are_unique
// CHECK-LABEL: func @host_0_1() attributes {tpu.outside_compilation_cluster = "0"}
func.func @host_0() {
  func.return
}
func.func @host_function_names_are_unique(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    tpu.outside_compilation "0" {
      hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      tpu.yield
    }
    tpu.yield
  }
  func.return
}

// -----

// A string result nothing uses is not sent: strings never reach the device.
// CHECK-LABEL: func @unused_string_result_stays_on_host
// CHECK:         tpu.recv_from_host "host_compute_channel_0_retvals"{{$}}
// CHECK-NEXT:    tpu.yield{{$}}
// CHECK-NOT:     !hlo.string
// CHECK-LABEL: func @host_0()
// CHECK:         %[[N:.*]] = hlo.string_to_number
// CHECK-NEXT:    tpu.send_from_host "host_compute_channel_0_held"(%[[N]] : tensor<f32>) {tpu.held}
func.func @unused_string_result_stays_on_host(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %f, %n = tpu.outside_compilation "0" -> (tensor<!hlo.string>, tensor<f32>) {
      %f1 = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      %n1 = hlo.string_to_number %f1 : (tensor<!hlo.string>) -> tensor<f32>
      tpu.yield %f1, %n1 : tensor<!hlo.string>, tensor<f32>
    }
    tpu.yield %n : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// CHECK: 'tpu.outside_compilation' op cluster '0' (at train.py:21) uses a string value (tensor<!hlo.string>) computed outside the cluster by 'hlo.string_format' (at train.py:19); strings never travel through the device: compute it inside the cluster
func.func @string_computed_on_device_is_an_error(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %f = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string> loc("train.py":19:5)
    tpu.outside_compilation "0" {
      hlo.print (%f) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>
      tpu.yield
    } loc("train.py":21:7)
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'tpu.outside_compilation' op cluster '0' returns a string value (result 0, tensor<!hlo.string>) to the device computation; strings never travel through the device: use it inside the cluster
func.func @string_result_used_on_device_is_an_error(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %f = tpu.outside_compilation "0" -> (tensor<!hlo.string>) {
      %f1 = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      tpu.yield %f1 : tensor<!hlo.string>
    }
    %n = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32>
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'tpu.outside_compilation' op cluster '0' (at train.py:9) appears twice in the module (first at train.py:5); cluster names must be unique: they name the host function and its channels
func.func @repeated_cluster_name_is_an_error(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    tpu.outside_compilation "0" {
      hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      tpu.yield
    } loc("train.py":5:3)
    tpu.outside_compilation "0" {
      hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      tpu.yield
    } loc("train.py":9:3)
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'tpu.outside_compilation' op cluster '0' is not inside a tpu.replicate; outside_compilation only has a meaning in a replicated computation
func.func @cluster_outside_replicate_is_an_error(%x: tensor<f32>) {
  tpu.outside_compilation "0" {
    hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
    tpu.yield
  }
  func.return
}

// -----

// A string of a cluster that a cluster in a loop body prints: the host keeps
// it for every iteration; the device receives cluster 0's (empty) answer
// before the loop.
// CHECK-LABEL: func @host_only_value_into_a_loop
// CHECK:         tpu.send_to_host "host_compute_channel_0_args"{{$}}
// CHECK:         tpu.recv_from_host "host_compute_channel_0_retvals"{{$}}
// CHECK-NEXT:    hlo.while
// CHECK-LABEL: func @host_0()
// CHECK:         tpu.send_from_host "host_compute_channel_0_held"(%{{.*}} : tensor<!hlo.string>) {tpu.held}
// CHECK-LABEL: func @host_1()
// CHECK-NEXT:    tpu.recv_at_host "host_compute_channel_1_args"{{$}}
// CHECK-NEXT:    %[[S:.*]] = tpu.recv_at_host "host_compute_channel_0_held" {tpu.held} : tensor<!hlo.string>
// CHECK-NEXT:    hlo.print(%[[S]])
func.func @host_only_value_into_a_loop(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %s = tpu.outside_compilation "0" -> (tensor<!hlo.string>) {
      %f = hlo.string_format "x={}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      tpu.yield %f : tensor<!hlo.string>
    } loc("train.py":3:5)
    %z = hlo.constant dense<0> : tensor<i32>
    %w = hlo.while(%i = %z) : tensor<i32> cond {
      %three = hlo.constant dense<3> : tensor<i32>
      %c = hlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %c : tensor<i1>
    } do {
    ^bb0(%i1: tensor<i32>):
      tpu.outside_compilation "1" {
        hlo.print (%s) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>
        tpu.yield
      } loc("train.py":6:7)
      %one = hlo.constant dense<1> : tensor<i32>
      %i2 = hlo.add %i1, %one : tensor<i32>
      hlo.return %i2 : tensor<i32>
    } loc("train.py":5:3)
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'tpu.outside_compilation' op cluster '0' is inside a tpu.replicate with placement = "host", which runs on the host already
func.func @cluster_in_a_host_replicate_is_an_error(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64, placement = "host"} {
    tpu.outside_compilation "0" {
      hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      tpu.yield
    }
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'tpu.outside_compilation' op cluster '1' is nested in cluster '0'; outside_compilation clusters cannot nest
// NESTED: Cannot nest outside_compilation clusters: 'tpu.outside_compilation' op cluster '1' (at train.py:4) is inside cluster '0' (at train.py:3)
func.func @nested_clusters_are_an_error(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    tpu.outside_compilation "0" {
      tpu.outside_compilation "1" {
        hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
        tpu.yield
      } loc("train.py":4:5)
      tpu.yield
    } loc("train.py":3:3)
    tpu.yield
  }
  func.return
}
