// TF's MLIR bridge cases that xtpu once failed (issue 11), named after the TF
// test they follow (tensorflow/compiler/mlir/tensorflow/tests/
// mark_ops_for_outside_compilation.mlir, extract_outside_compilation.mlir,
// extract_head_tail_outside_compilation.mlir). MARK checks what
// tpu-mark-outside-compilation places on the host; the default checks the
// structure after the three outside-compilation passes: strings never reach
// the device, the host has the replica inputs and keeps host values for later
// clusters and the outputs, and the device program keeps only what it
// computes with (or is not run at all).
// RUN: xtpu-opt %s --split-input-file -p tpu-mark-outside-compilation | filecheck %s --check-prefix=MARK
// RUN: xtpu-opt %s --split-input-file -p tpu-mark-outside-compilation,tpu-extract-head-tail-outside-compilation,tpu-outline-outside-compilation | filecheck %s
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics -p 'tpu-mark-outside-compilation{allow-soft-placement=false}' | filecheck %s --check-prefix=NOSOFT

// An hlo.if whose branch uses a string defined outside it (here a replica
// input) moves to the host whole, its branches unmarked inside it.
// MARK-LABEL: func @if_region_captured_string
// MARK:         %one = hlo.constant dense<1>
// MARK-NEXT:    %y = tpu.outside_compilation "auto0" -> (tensor<f32>) {
// MARK-NEXT:      %y_1 = hlo.if %p -> (tensor<f32>) {
// MARK-NEXT:        hlo.string_to_number %s
// MARK-NOT:         tpu.outside_compilation
// MARK:           tpu.yield %y_1
// MARK:         hlo.negate %y
// The cluster needs only replica inputs: it runs before the device program,
// which never sees the string.
// CHECK-LABEL: func @if_region_captured_string
// CHECK:         %[[H:.*]] = tpu.replicate([%a] as %{{.*}}: tensor<i1>, [%b] as %{{.*}}: tensor<!hlo.string>) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "auto0"}
// CHECK-NEXT:      hlo.if
// CHECK:         tpu.replicate([%[[H]]] as %{{.*}}: tensor<f32>) {n = 1 : i64} {
// CHECK-NOT:       !hlo.string
// CHECK:           hlo.negate
// NOSOFT: 'hlo.if' op cannot run on the device (at model.py:7): its regions use a string value defined outside it; place it in outside_compilation or allow soft placement
func.func @if_region_captured_string(%a: tensor<i1>, %b: tensor<!hlo.string>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %p: tensor<i1>, [%b] as %s: tensor<!hlo.string>) {n = 1 : i64} {
    %one = hlo.constant dense<1> : tensor<i32>
    %y = hlo.if %p -> (tensor<f32>) {
      %n = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
      hlo.return %n : tensor<f32>
    } else {
      %c = hlo.constant dense<1.0> : tensor<f32>
      hlo.return %c : tensor<f32>
    } loc("model.py":7:3)
    %z = hlo.negate %y : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// The same with a string that the device program makes (a host op: its own
// cluster) and a predicate the device computes: the branch's cluster stays,
// the string goes host to host, the predicate is sent.
// MARK-LABEL: func @if_region_captured_string_made_in_the_body
// MARK:         %f = tpu.outside_compilation "auto0" -> (tensor<!hlo.string>)
// MARK:         %p = hlo.compare
// MARK-NEXT:    %y = tpu.outside_compilation "auto1" -> (tensor<f32>) {
// MARK-NEXT:      hlo.if %p
// Here the format needs only the input and the branch only the device's
// predicate: head and tail clusters, both on the host.
// CHECK-LABEL: func @if_region_captured_string_made_in_the_body
// CHECK:         %[[F:.*]] = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "auto0"}
// CHECK:         %[[D:.*]] = tpu.replicate([%a] as %{{.*}}: tensor<f32>) {n = 1 : i64} {
// CHECK-NOT:       !hlo.string
// CHECK:           tpu.yield %p : tensor<i1>
// CHECK:         tpu.replicate([%[[D]]] as %{{.*}}: tensor<i1>, [%[[F]]] as %{{.*}}: tensor<!hlo.string>, [%a] as %{{.*}}: tensor<f32>) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "auto1"}
// CHECK-NEXT:      hlo.if
// CHECK-NEXT:        hlo.string_to_number
func.func @if_region_captured_string_made_in_the_body(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %f = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
    %zero = hlo.constant dense<0.0> : tensor<f32>
    %p = hlo.compare GT, %x, %zero : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %y = hlo.if %p -> (tensor<f32>) {
      %n = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32>
      hlo.return %n : tensor<f32>
    } else {
      hlo.return %x : tensor<f32>
    }
    tpu.yield %y : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// An hlo.while whose body uses a captured string moves to the host whole.
// MARK-LABEL: func @while_region_captured_string
// MARK:         %w = tpu.outside_compilation "auto0" -> (tensor<f32>) {
// MARK-NEXT:      hlo.while
// MARK-NOT:       tpu.outside_compilation
// MARK:         hlo.negate %w
// CHECK-LABEL: func @while_region_captured_string
// CHECK:         tpu.replicate({{.*}}) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "auto0"}
// CHECK-NEXT:      %{{.*}} = hlo.constant
// CHECK-NEXT:      hlo.while
// CHECK:         tpu.replicate([%{{.*}}] as %{{.*}}: tensor<f32>) {n = 1 : i64} {
// CHECK-NEXT:      hlo.negate
// NOSOFT: 'hlo.while' op cannot run on the device (at model.py:30): its regions use a string value defined outside it
func.func @while_region_captured_string(%a: tensor<i32>, %b: tensor<!hlo.string>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %k: tensor<i32>, [%b] as %s: tensor<!hlo.string>) {n = 1 : i64} {
    %init = hlo.constant dense<1.0> : tensor<f32>
    %w:2 = hlo.while(%v = %init, %i = %k) : tensor<f32>, tensor<i32> cond {
      %limit = hlo.constant dense<5> : tensor<i32>
      %c = hlo.compare NE, %i, %limit : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %c : tensor<i1>
    } do {
    ^bb0(%v1: tensor<f32>, %i1: tensor<i32>):
      %one = hlo.constant dense<1> : tensor<i32>
      %i2 = hlo.subtract %i1, %one : tensor<i32>
      %n = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
      hlo.return %n, %i2 : tensor<f32>, tensor<i32>
    } loc("model.py":30:5)
    %z = hlo.negate %w#0 : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// TF's outside_compiled_ops_with_multiple_region_single_cluster, as xtpu's
// clusters (one per region): B in the body, C in a loop body, D in a branch
// inside it. C reads B and D reads C on the host (held values), though the
// device uses both: nothing goes back from the device, and the device
// receives B's and C's answers before the blocks whose clusters read them.
// CHECK-LABEL: func @outside_compiled_ops_with_multiple_region_single_cluster
// CHECK:         %dx = hlo.negate %x
// CHECK-NEXT:    tpu.send_to_host "host_compute_channel_0_args"(%dx : tensor<f32>)
// CHECK:         %b = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
// CHECK-NEXT:    hlo.while(%i = %zero, %v = %b)
// CHECK:         ^bb0(%i1: tensor<i32>, %v1: tensor<f32>):
// CHECK-NEXT:      tpu.send_to_host "host_compute_channel_1_args"{{$}}
// CHECK-NEXT:      %c = tpu.recv_from_host "host_compute_channel_1_retvals" : tensor<f32>
// CHECK-NEXT:      %d = hlo.if %p -> (tensor<f32>) {
// CHECK-NEXT:        tpu.send_to_host "host_compute_channel_2_args"{{$}}
// CHECK-NEXT:        tpu.recv_from_host "host_compute_channel_2_retvals" : tensor<f32>
// CHECK:         func.func @host_0()
// CHECK-NEXT:      %[[DX:.*]] = tpu.recv_at_host "host_compute_channel_0_args" : tensor<f32>
// CHECK-NEXT:      %[[B:.*]] = hlo.exponential %[[DX]]
// CHECK-NEXT:      tpu.send_from_host "host_compute_channel_0_held"(%[[B]] : tensor<f32>) {tpu.held}
// CHECK-NEXT:      tpu.send_from_host "host_compute_channel_0_retvals"(%[[B]] : tensor<f32>)
// CHECK:         func.func @host_1()
// CHECK-NEXT:      tpu.recv_at_host "host_compute_channel_1_args"{{$}}
// CHECK-NEXT:      %[[B2:.*]] = tpu.recv_at_host "host_compute_channel_0_held" {tpu.held} : tensor<f32>
// CHECK-NEXT:      %[[C:.*]] = hlo.add %[[B2]], %[[B2]]
// CHECK-NEXT:      tpu.send_from_host "host_compute_channel_1_held"(%[[C]] : tensor<f32>) {tpu.held}
// CHECK-NEXT:      tpu.send_from_host "host_compute_channel_1_retvals"(%[[C]] : tensor<f32>)
// CHECK:         func.func @host_2()
// CHECK-NEXT:      tpu.recv_at_host "host_compute_channel_2_args"{{$}}
// CHECK-NEXT:      %[[C2:.*]] = tpu.recv_at_host "host_compute_channel_1_held" {tpu.held} : tensor<f32>
// CHECK-NEXT:      hlo.multiply %[[C2]], %[[C2]]
func.func @outside_compiled_ops_with_multiple_region_single_cluster(%a: tensor<f32>, %g: tensor<i1>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>, [%g] as %p: tensor<i1>) {n = 1 : i64} {
    %dx = hlo.negate %x : tensor<f32>
    %b = tpu.outside_compilation "0" -> (tensor<f32>) {
      %e = hlo.exponential %dx : tensor<f32>
      tpu.yield %e : tensor<f32>
    }
    %zero = hlo.constant dense<0> : tensor<i32>
    %w:2 = hlo.while(%i = %zero, %v = %b) : tensor<i32>, tensor<f32> cond {
      %three = hlo.constant dense<3> : tensor<i32>
      %lt = hlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %lt : tensor<i1>
    } do {
    ^bb0(%i1: tensor<i32>, %v1: tensor<f32>):
      %c = tpu.outside_compilation "1" -> (tensor<f32>) {
        %t = hlo.add %b, %b : tensor<f32>
        tpu.yield %t : tensor<f32>
      }
      %d = hlo.if %p -> (tensor<f32>) {
        %dd = tpu.outside_compilation "2" -> (tensor<f32>) {
          %m = hlo.multiply %c, %c : tensor<f32>
          tpu.yield %m : tensor<f32>
        }
        hlo.return %dd : tensor<f32>
      } else {
        hlo.return %c : tensor<f32>
      }
      %one = hlo.constant dense<1> : tensor<i32>
      %i2 = hlo.add %i1, %one : tensor<i32>
      %s = hlo.add %v1, %d : tensor<f32>
      hlo.return %i2, %s : tensor<i32>, tensor<f32>
    }
    tpu.yield %w#1 : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// TF's mixed_input_single_outside_compilation: the cluster uses a replica
// input and a device value; only the device value is sent, the host has the
// input.
// CHECK-LABEL: func @mixed_input_single_outside_compilation
// CHECK:         tpu.replicate([%a0, %a1] as %{{.*}}: tensor<f32>) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "replica_inputs"} {
// CHECK-NEXT:      tpu.send_from_host "host_compute_channel_replica_inputs"(%{{.*}} : tensor<f32>) {tpu.held}
// CHECK:         tpu.replicate([%a0, %a1] as %x: tensor<f32>) {n = 2 : i64} {
// CHECK-NEXT:      %y = hlo.multiply %x, %x
// CHECK-NEXT:      tpu.send_to_host "host_compute_channel_0_args"(%y : tensor<f32>)
// CHECK-LABEL: func.func @host_0()
// CHECK-NEXT:      %[[Y:.*]] = tpu.recv_at_host "host_compute_channel_0_args" : tensor<f32>
// CHECK-NEXT:      %[[X:.*]] = tpu.recv_at_host "host_compute_channel_replica_inputs" {tpu.held} : tensor<f32>
// CHECK-NEXT:      hlo.add %[[X]], %[[Y]]
func.func @mixed_input_single_outside_compilation(%a0: tensor<f32>, %a1: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %r:2 = tpu.replicate([%a0, %a1] as %x: tensor<f32>) {n = 2 : i64} {
    %y = hlo.multiply %x, %x : tensor<f32>
    %b = tpu.outside_compilation "0" -> (tensor<f32>) {
      %s = hlo.add %x, %y : tensor<f32>
      tpu.yield %s : tensor<f32>
    }
    %c = hlo.negate %b : tensor<f32>
    tpu.yield %c : tensor<f32>
  }
  func.return %r#0, %r#1 : tensor<f32>, tensor<f32>
}

// -----

// TF's tail_aliased_output: outputs that are replica inputs are the inputs
// themselves, the tail cluster's output comes from the host, and the device
// yields only what it computes (C and the constant E).
// CHECK-LABEL: func @tail_aliased_output
// CHECK:         tpu.replicate([%b0, %b1] as %z: tensor<f32>) {n = 2 : i64} {
// CHECK-NEXT:      %c = hlo.negate %z
// CHECK-NEXT:      %e = hlo.constant
// CHECK-NEXT:      tpu.yield %c, %e : tensor<f32>, tensor<f32>
// CHECK:         %[[T:.*]], %[[T1:.*]] = tpu.replicate([%[[D0:.*]], %[[D1:.*]]] as %{{.*}}: tensor<f32>, [%a0, %a1] as %{{.*}}: tensor<f32>) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "0"}
// CHECK:         func.return %a0, %a1, %b0, %b1, %[[D0]], %[[D1]], %[[T]], %[[T1]], %{{.*}}, %{{.*}} :
func.func @tail_aliased_output(%a0: tensor<f32>, %a1: tensor<f32>, %b0: tensor<f32>, %b1: tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) {
  %r:10 = tpu.replicate([%a0, %a1] as %x: tensor<f32>, [%b0, %b1] as %z: tensor<f32>) {n = 2 : i64} {
    %c = hlo.negate %z : tensor<f32>
    %d = tpu.outside_compilation "0" -> (tensor<f32>) {
      %t = hlo.add %c, %x : tensor<f32>
      tpu.yield %t : tensor<f32>
    }
    %e = hlo.constant dense<0.0> : tensor<f32>
    tpu.yield %x, %z, %c, %d, %e : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
  func.return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %r#6, %r#7, %r#8, %r#9 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
}

// -----

// TF's op_string_operand: the string op is marked, and the device program
// loses the string input it has no use for.
// MARK-LABEL: func @op_string_operand
// MARK:         %one = hlo.constant dense<1>
// MARK-NEXT:    tpu.outside_compilation "auto0"
// MARK-NEXT:      hlo.string_to_number %s
// CHECK-LABEL: func @op_string_operand
// CHECK:         tpu.replicate([%s0, %s1] as %{{.*}}: tensor<!hlo.string>) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "auto0"}
// CHECK:         tpu.replicate() {n = 2 : i64} {
// CHECK-NEXT:      %one = hlo.constant dense<1>
// CHECK-NEXT:      %y = hlo.add %one, %one
// CHECK-NEXT:      tpu.yield %y
func.func @op_string_operand(%s0: tensor<!hlo.string>, %s1: tensor<!hlo.string>) -> (tensor<i32>, tensor<i32>) {
  %r:2 = tpu.replicate([%s0, %s1] as %s: tensor<!hlo.string>) {n = 2 : i64} {
    %one = hlo.constant dense<1> : tensor<i32>
    %n = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
    %y = hlo.add %one, %one : tensor<i32>
    tpu.yield %y : tensor<i32>
  }
  func.return %r#0, %r#1 : tensor<i32>, tensor<i32>
}

// -----

// TF's op_string_operand_string_result.
// MARK-LABEL: func @op_string_operand_string_result
// MARK:         tpu.outside_compilation "auto0"
// MARK-NEXT:      hlo.string_format "{}"(%s)
// CHECK-LABEL: func @op_string_operand_string_result
// CHECK:         tpu.replicate([%s0, %s1] as %{{.*}}: tensor<!hlo.string>) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "auto0"}
// CHECK:         tpu.replicate() {n = 2 : i64} {
// CHECK-NOT:       !hlo.string
// CHECK:           tpu.yield %y
func.func @op_string_operand_string_result(%s0: tensor<!hlo.string>, %s1: tensor<!hlo.string>) -> (tensor<i32>, tensor<i32>) {
  %r:2 = tpu.replicate([%s0, %s1] as %s: tensor<!hlo.string>) {n = 2 : i64} {
    %one = hlo.constant dense<1> : tensor<i32>
    %f = hlo.string_format "{}" (%s) summarize = 3 : (tensor<!hlo.string>) -> tensor<!hlo.string>
    %y = hlo.add %one, %one : tensor<i32>
    tpu.yield %y : tensor<i32>
  }
  func.return %r#0, %r#1 : tensor<i32>, tensor<i32>
}

// -----

// A device program with nothing left to compute is not run at all: the host
// replicate of the head cluster is the whole program.
// CHECK-LABEL: func @op_string_operand_nothing_left_for_the_device
// CHECK-NEXT:    %[[H0:.*]], %[[H1:.*]] = tpu.replicate([%s0, %s1] as %{{.*}}: tensor<!hlo.string>) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "auto0"}
// CHECK-NEXT:      hlo.string_to_number
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[H0]], %[[H1]]
func.func @op_string_operand_nothing_left_for_the_device(%s0: tensor<!hlo.string>, %s1: tensor<!hlo.string>) -> (tensor<f32>, tensor<f32>) {
  %r:2 = tpu.replicate([%s0, %s1] as %s: tensor<!hlo.string>) {n = 2 : i64} {
    %n = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
    tpu.yield %n : tensor<f32>
  }
  func.return %r#0, %r#1 : tensor<f32>, tensor<f32>
}

// -----

// A string made in the body by a cluster that needs a device value, which
// the cluster also reads and the program returns: the host keeps it and a
// host replicate after the device program returns it, never through the
// device.
// CHECK-LABEL: func @string_output_of_a_body_cluster
// CHECK:         %[[D:.*]] = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
// CHECK-NOT:       !hlo.string
// CHECK:         }
// CHECK-NEXT:    %[[S:.*]] = tpu.replicate() {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "auto0"} {
// CHECK-NEXT:      tpu.recv_at_host "host_compute_channel_auto0_held" {tpu.held} : tensor<!hlo.string>
// CHECK:         func.return %[[S]], %[[D]]
// CHECK-LABEL: func.func @host_auto0()
// CHECK:           %[[S:.*]] = hlo.string_format
// CHECK-NEXT:      %[[N:.*]] = hlo.string_to_number %[[S]]
// CHECK-NEXT:      tpu.send_from_host "host_compute_channel_auto0_held"(%[[S]] : tensor<!hlo.string>) {tpu.held}
// CHECK-NEXT:      tpu.send_from_host "host_compute_channel_auto0_retvals"(%[[N]] : tensor<f32>)
func.func @string_output_of_a_body_cluster(%a: tensor<f32>) -> (tensor<!hlo.string>, tensor<f32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %two = hlo.constant dense<2.0> : tensor<f32>
    %y = hlo.multiply %x, %two : tensor<f32>
    %s = hlo.string_format "{}" (%y) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
    %n = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
    %z = hlo.multiply %n, %two : tensor<f32>
    tpu.yield %s, %z : tensor<!hlo.string>, tensor<f32>
  }
  func.return %r#0, %r#1 : tensor<!hlo.string>, tensor<f32>
}

// -----

// Only device code decides: a branch whose captured string only a cluster
// inside it reads stays on the device (the cluster reads the string on the
// host), with the cluster's send/recv in the branch.
// MARK-LABEL: func @if_region_string_read_only_by_a_cluster_stays
// MARK:         %y = hlo.if %p -> (tensor<f32>) {
// MARK-NEXT:      tpu.outside_compilation "1"
// CHECK-LABEL: func @if_region_string_read_only_by_a_cluster_stays
// CHECK:         tpu.recv_from_host "host_compute_channel_0_retvals"{{$}}
// CHECK-NEXT:    %y = hlo.if %p -> (tensor<f32>) {
// CHECK-NEXT:      tpu.send_to_host "host_compute_channel_1_args"{{$}}
// CHECK-NEXT:      tpu.recv_from_host "host_compute_channel_1_retvals" : tensor<f32>
// CHECK-LABEL: func.func @host_1()
// CHECK-NEXT:      tpu.recv_at_host "host_compute_channel_1_args"{{$}}
// CHECK-NEXT:      tpu.recv_at_host "host_compute_channel_0_held" {tpu.held} : tensor<!hlo.string>
func.func @if_region_string_read_only_by_a_cluster_stays(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %dx = hlo.negate %x : tensor<f32>
    %s = tpu.outside_compilation "0" -> (tensor<!hlo.string>) {
      %f = hlo.string_format "{}" (%dx) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      tpu.yield %f : tensor<!hlo.string>
    }
    %zero = hlo.constant dense<0.0> : tensor<f32>
    %p = hlo.compare GT, %dx, %zero : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %y = hlo.if %p -> (tensor<f32>) {
      %n = tpu.outside_compilation "1" -> (tensor<f32>) {
        %m = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
        tpu.yield %m : tensor<f32>
      }
      hlo.return %n : tensor<f32>
    } else {
      hlo.return %dx : tensor<f32>
    }
    %z = hlo.add %y, %dx : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A cluster the user placed in an hlo.if that moves to the host whole (its
// branch uses a captured string) is host code there already: it is dissolved
// into the branch (TF flattens outside compilation nested in host code). Here
// the whole if needs only replica inputs: a head cluster on the host.
// MARK-LABEL: func @explicit_cluster_in_host_if_is_dissolved
// MARK:         %y = tpu.outside_compilation "auto0" -> (tensor<f32>) {
// MARK-NEXT:      %y_1 = hlo.if %p -> (tensor<f32>) {
// MARK-NEXT:        %m = hlo.negate %x
// MARK-NEXT:        %k = hlo.string_to_number %s
// MARK-NEXT:        %t = hlo.add %m, %k
// MARK-NOT:     tpu.outside_compilation
// MARK:         hlo.multiply %y, %y
// CHECK-LABEL: func @explicit_cluster_in_host_if_is_dissolved
// CHECK:         %[[H:.*]] = tpu.replicate({{.*}}) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "auto0"}
// CHECK-NEXT:      hlo.if
// CHECK-NEXT:        hlo.negate
// CHECK-NEXT:        hlo.string_to_number
// CHECK:         tpu.replicate([%[[H]]] as %{{.*}}: tensor<f32>) {n = 1 : i64} {
// CHECK-NEXT:      hlo.multiply
// CHECK-NOT:     host_compute_channel_0
// CHECK-NOT:     func.func @host_0
func.func @explicit_cluster_in_host_if_is_dissolved(%a: tensor<i1>, %b: tensor<!hlo.string>, %c: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %p: tensor<i1>, [%b] as %s: tensor<!hlo.string>, [%c] as %x: tensor<f32>) {n = 1 : i64} {
    %y = hlo.if %p -> (tensor<f32>) {
      %n = tpu.outside_compilation "0" -> (tensor<f32>) {
        %m = hlo.negate %x : tensor<f32>
        tpu.yield %m : tensor<f32>
      }
      %k = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
      %t = hlo.add %n, %k : tensor<f32>
      hlo.return %t : tensor<f32>
    } else {
      hlo.return %x : tensor<f32>
    }
    %z = hlo.multiply %y, %y : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// The same in an hlo.while body whose cluster stays in the device program
// (the device computes its input and uses its result): one host function
// runs the whole loop with the user's cluster in it, not nested clusters.
// MARK-LABEL: func @explicit_cluster_in_host_while_is_dissolved
// MARK:         %w = tpu.outside_compilation "auto0" -> (tensor<f32>) {
// MARK:           hlo.while
// MARK-NOT:       tpu.outside_compilation
// MARK:           %q = hlo.string_to_number %s
// MARK-NEXT:      %ev = hlo.exponential %v1
// MARK-NEXT:      %v2 = hlo.add %q, %ev
// MARK-NOT:     tpu.outside_compilation
// MARK:         hlo.negate %w :
// CHECK-LABEL: func @explicit_cluster_in_host_while_is_dissolved
// CHECK:         tpu.send_to_host "host_compute_channel_auto0_args"(%dx : tensor<f32>)
// CHECK-NEXT:    tpu.recv_from_host "host_compute_channel_auto0_retvals" : tensor<f32>
// CHECK-NOT:     host_compute_channel_1
// CHECK-LABEL: func.func @host_auto0()
// CHECK:           hlo.while
// CHECK:             hlo.string_to_number
// CHECK-NEXT:        hlo.exponential
// CHECK-NOT:     host_compute_channel_1
// CHECK-NOT:     func.func @host_1
func.func @explicit_cluster_in_host_while_is_dissolved(%a: tensor<f32>, %b: tensor<!hlo.string>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>, [%b] as %s: tensor<!hlo.string>) {n = 1 : i64} {
    %dx = hlo.negate %x : tensor<f32>
    %k = hlo.constant dense<3> : tensor<i32>
    %w:2 = hlo.while(%v = %dx, %i = %k) : tensor<f32>, tensor<i32> cond {
      %limit = hlo.constant dense<0> : tensor<i32>
      %c = hlo.compare NE, %i, %limit : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %c : tensor<i1>
    } do {
    ^bb0(%v1: tensor<f32>, %i1: tensor<i32>):
      %one = hlo.constant dense<1> : tensor<i32>
      %i2 = hlo.subtract %i1, %one : tensor<i32>
      %q = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
      %e = tpu.outside_compilation "1" -> (tensor<f32>) {
        %ev = hlo.exponential %v1 : tensor<f32>
        tpu.yield %ev : tensor<f32>
      }
      %v2 = hlo.add %q, %e : tensor<f32>
      hlo.return %v2, %i2 : tensor<f32>, tensor<i32>
    }
    %z = hlo.negate %w#0 : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r : tensor<f32>
}
