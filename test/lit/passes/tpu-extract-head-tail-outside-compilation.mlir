// tpu-extract-head-tail-outside-compilation: TF's
// tf-tpu-extract-head-tail-outside-compilation. Clusters of the device
// replicate body that need nothing from the device (head) move into a host
// replicate (placement = "host") before it; clusters whose results the device
// does not use (tail) move into one after it. Clusters in hlo.if / hlo.while
// stay, and a cluster with side effects never passes one that stays.
// RUN: xtpu-opt %s --split-input-file -p tpu-extract-head-tail-outside-compilation | filecheck %s

// CHECK-LABEL: func @no_clusters
// CHECK-NOT:     placement
// CHECK:         tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
// CHECK-NEXT:      %y = hlo.negate %x
func.func @no_clusters(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %y = hlo.negate %x : tensor<f32>
    tpu.yield %y : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A head cluster of several ops; its inputs keep their grouping (input i of
// replica r is operand i*n+r), the constant it uses is copied, and its result
// reaches the device as a new replicated input.
// CHECK-LABEL: func @head_cluster
// CHECK:         %[[H:.*]], %[[H1:.*]] = tpu.replicate([%a, %b] as %[[HX:.*]]: tensor<f32>) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "0"} {
// CHECK-NEXT:      %[[C:.*]] = hlo.constant dense<2.000000e+00>
// CHECK-NEXT:      %[[F:.*]] = hlo.string_format "{}"(%[[HX]])
// CHECK-NEXT:      %[[M:.*]] = hlo.string_to_number %[[F]]
// CHECK-NEXT:      %[[S:.*]] = hlo.multiply %[[M]], %[[C]]
// CHECK-NEXT:      tpu.yield %[[S]] : tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %r, %r_1 = tpu.replicate([%a, %b] as %[[X:.*]]: tensor<f32>, [%[[H]], %[[H1]]] as %h: tensor<f32>) {n = 2 : i64} {
// CHECK-NEXT:      %y = hlo.negate %[[X]]
// CHECK-NEXT:      %z = hlo.add %h, %y
// CHECK-NEXT:      tpu.yield %z
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r, %r_1
func.func @head_cluster(%a: tensor<f32>, %b: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = 2 : i64} {
    %c = hlo.constant dense<2.0> : tensor<f32>
    %y = hlo.negate %x : tensor<f32>
    %h = tpu.outside_compilation "0" -> (tensor<f32>) {
      %f = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      %m = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32>
      %s = hlo.multiply %m, %c : tensor<f32>
      tpu.yield %s : tensor<f32>
    }
    %z = hlo.add %h, %y : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r#0, %r#1 : tensor<f32>, tensor<f32>
}

// -----

// A head cluster may use another's results (the string never leaves the
// host); a head result the body only yields replaces the output directly.
// CHECK-LABEL: func @head_clusters_chain_and_aliased_output
// CHECK:         %[[H:.*]] = tpu.replicate([%a] as %{{.*}}: tensor<f32>) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "0,1"} {
// CHECK-NEXT:      %[[F:.*]] = hlo.string_format
// CHECK-NEXT:      %[[M:.*]] = hlo.string_to_number %[[F]]
// CHECK-NEXT:      tpu.yield %[[M]] : tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[D:.*]] = tpu.replicate([%a] as %[[X:.*]]: tensor<f32>, [%b] as %k: tensor<i32>) {n = 1 : i64} {
// CHECK-NEXT:      %y = hlo.exponential %[[X]]
// CHECK-NEXT:      tpu.yield %y : tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[H]], %[[D]]
func.func @head_clusters_chain_and_aliased_output(%a: tensor<f32>, %b: tensor<i32>) -> (tensor<f32>, tensor<f32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<f32>, [%b] as %k: tensor<i32>) {n = 1 : i64} {
    %s = tpu.outside_compilation "0" -> (tensor<!hlo.string>) {
      %f = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      tpu.yield %f : tensor<!hlo.string>
    }
    %m = tpu.outside_compilation "1" -> (tensor<f32>) {
      %m1 = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
      tpu.yield %m1 : tensor<f32>
    }
    %y = hlo.exponential %x : tensor<f32>
    tpu.yield %m, %y : tensor<f32>, tensor<f32>
  }
  func.return %r#0, %r#1 : tensor<f32>, tensor<f32>
}

// -----

// A tail cluster takes the device value it needs as a new output of the
// device replicate and the replica's input directly; its result replaces
// the output that yielded it.
// CHECK-LABEL: func @tail_cluster
// CHECK:         %r, %r_1, %[[Y:.*]], %[[Y1:.*]] = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = 2 : i64} {
// CHECK-NEXT:      %y = hlo.negate %x
// CHECK-NEXT:      %z = hlo.exponential %y
// CHECK-NEXT:      tpu.yield %z, %y : tensor<f32>, tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[T:.*]], %[[T1:.*]] = tpu.replicate([%[[Y]], %[[Y1]]] as %[[TY:.*]]: tensor<f32>, [%a, %b] as %[[TX:.*]]: tensor<f32>) {n = 2 : i64, placement = "host", tpu.outside_compilation_cluster = "0"} {
// CHECK-NEXT:      hlo.print(%[[TY]], %[[TX]])
// CHECK-NEXT:      %[[S:.*]] = hlo.add %[[TY]], %[[TX]]
// CHECK-NEXT:      tpu.yield %[[S]] : tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r, %r_1, %[[T]], %[[T1]]
func.func @tail_cluster(%a: tensor<f32>, %b: tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) {
  %r:4 = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = 2 : i64} {
    %y = hlo.negate %x : tensor<f32>
    %t = tpu.outside_compilation "0" -> (tensor<f32>) {
      hlo.print (%y, %x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>, tensor<f32>
      %t1 = hlo.add %y, %x : tensor<f32>
      tpu.yield %t1 : tensor<f32>
    }
    %z = hlo.exponential %y : tensor<f32>
    tpu.yield %z, %t : tensor<f32>, tensor<f32>
  }
  func.return %r#0, %r#1, %r#2, %r#3 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
}

// -----

// Head and tail: the string the head makes goes to the tail host to host.
// CHECK-LABEL: func @head_and_tail
// CHECK:         %[[S:.*]] = tpu.replicate([%a] as %{{.*}}: tensor<f32>) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "0"} {
// CHECK-NEXT:      %[[F:.*]] = hlo.string_format "in={}"
// CHECK-NEXT:      tpu.yield %[[F]] : tensor<!hlo.string>
// CHECK-NEXT:    }
// CHECK-NEXT:    %r = tpu.replicate([%a] as %[[X:.*]]: tensor<f32>) {n = 1 : i64} {
// CHECK-NEXT:      %g = tpu.cross_replica_sum %[[X]]
// CHECK-NEXT:      tpu.yield %g : tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    tpu.replicate([%[[S]]] as %[[TS:.*]]: tensor<!hlo.string>, [%r] as %[[TG:.*]]: tensor<f32>) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "1"} {
// CHECK-NEXT:      hlo.print(%[[TS]], %[[TG]])
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r
func.func @head_and_tail(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %s = tpu.outside_compilation "0" -> (tensor<!hlo.string>) {
      %f = hlo.string_format "in={}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      tpu.yield %f : tensor<!hlo.string>
    }
    %g = tpu.cross_replica_sum %x : tensor<f32>
    tpu.outside_compilation "1" {
      hlo.print (%s, %g) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>, tensor<f32>
      tpu.yield
    }
    tpu.yield %g : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A cluster that needs a device value and whose result the device needs is
// neither head nor tail.
// CHECK-LABEL: func @middle_cluster_stays
// CHECK-NOT:     placement
// CHECK:         tpu.outside_compilation "0"
func.func @middle_cluster_stays(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %y = hlo.negate %x : tensor<f32>
    %m = tpu.outside_compilation "0" -> (tensor<f32>) {
      %e = hlo.exponential %y : tensor<f32>
      tpu.yield %e : tensor<f32>
    }
    %z = hlo.negate %m : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// "0" prints a device value: it stays. "1" needs only the input, but it has
// side effects and "0" stays, so it cannot move ahead of it (and the device
// uses its result, so it is no tail either). "2" has no side effects: it moves
// to the head past both. "3" prints only the input too, but moves to the tail,
// after "0" and "1".
// CHECK-LABEL: func @side_effects_do_not_pass_a_cluster_that_stays
// CHECK:         %[[H:.*]] = tpu.replicate([%a] as %{{.*}}: tensor<f32>) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "2"} {
// CHECK-NEXT:      hlo.exponential
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %r = tpu.replicate([%a] as %{{.*}}: tensor<f32>, [%[[H]]] as %p: tensor<f32>) {n = 1 : i64} {
// CHECK-NEXT:      %y = hlo.negate
// CHECK-NEXT:      tpu.outside_compilation "0" {
// CHECK:           %m = tpu.outside_compilation "1" -> (tensor<f32>) {
// CHECK:           %z = hlo.add %m, %p
// CHECK-NEXT:      tpu.yield %z
// CHECK-NEXT:    }
// CHECK-NEXT:    tpu.replicate([%a] as %{{.*}}: tensor<f32>) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "3"} {
// CHECK-NEXT:      hlo.print
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
func.func @side_effects_do_not_pass_a_cluster_that_stays(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %y = hlo.negate %x : tensor<f32>
    tpu.outside_compilation "0" {
      hlo.print (%y) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      tpu.yield
    }
    %m = tpu.outside_compilation "1" -> (tensor<f32>) {
      hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      %e = hlo.exponential %x : tensor<f32>
      tpu.yield %e : tensor<f32>
    }
    %p = tpu.outside_compilation "2" -> (tensor<f32>) {
      %e = hlo.exponential %x : tensor<f32>
      tpu.yield %e : tensor<f32>
    }
    tpu.outside_compilation "3" {
      hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      tpu.yield
    }
    %z = hlo.add %m, %p : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A cluster in control flow is never head or tail; one with side effects
// keeps the next one from moving to the head (it becomes a tail instead).
// CHECK-LABEL: func @clusters_in_control_flow_stay
// CHECK:         %r = tpu.replicate([%a] as %{{.*}}: tensor<f32>, [%b] as %p: tensor<i1>) {n = 1 : i64} {
// CHECK-NEXT:      %y = hlo.if %p -> (tensor<f32>) {
// CHECK-NEXT:        %t = tpu.outside_compilation "0"
// CHECK:         tpu.replicate([%a] as %{{.*}}: tensor<f32>) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "1"} {
func.func @clusters_in_control_flow_stay(%a: tensor<f32>, %b: tensor<i1>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>, [%b] as %p: tensor<i1>) {n = 1 : i64} {
    %y = hlo.if %p -> (tensor<f32>) {
      %t = tpu.outside_compilation "0" -> (tensor<f32>) {
        hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
        %e = hlo.exponential %x : tensor<f32>
        tpu.yield %e : tensor<f32>
      }
      hlo.return %t : tensor<f32>
    } else {
      hlo.return %x : tensor<f32>
    }
    tpu.outside_compilation "1" {
      hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      tpu.yield
    }
    tpu.yield %y : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A head cluster whose string a staying cluster needs moves all the same:
// the string becomes a replica input of the device replicate, which
// tpu-outline-outside-compilation hands to host code on the host and takes
// off the device program (TF: the head launch's result feeds the host
// launch directly).
// CHECK-LABEL: func @host_value_of_a_head_cluster_for_a_staying_one
// CHECK:         %[[S:.*]] = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64, placement = "host", tpu.outside_compilation_cluster = "0"}
// CHECK:         tpu.replicate([%a] as %{{.*}}: tensor<f32>, [%[[S]]] as %s: tensor<!hlo.string>) {n = 1 : i64} {
// CHECK:           tpu.outside_compilation "1"
func.func @host_value_of_a_head_cluster_for_a_staying_one(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %s = tpu.outside_compilation "0" -> (tensor<!hlo.string>) {
      %f = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      tpu.yield %f : tensor<!hlo.string>
    }
    %y = hlo.negate %x : tensor<f32>
    %n = tpu.outside_compilation "1" -> (tensor<f32>) {
      %m = hlo.string_to_number %s : (tensor<!hlo.string>) -> tensor<f32>
      %m2 = hlo.add %m, %y : tensor<f32>
      tpu.yield %m2 : tensor<f32>
    }
    %z = hlo.add %n, %y : tensor<f32>
    tpu.yield %z : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A middle cluster that needs no device value (a replica input and results
// of cluster "a") joins "a": its ops run at the end of "a", whose results
// grow by its own; no round trip of its own.
// CHECK-LABEL: func @middle_cluster_joins_its_producer
// CHECK:         tpu.replicate([%a] as %x: tensor<f32>, [%b] as %w: tensor<f32>) {n = 1 : i64} {
// CHECK-NEXT:      %d = hlo.negate %x
// CHECK-NEXT:      %h, %k = tpu.outside_compilation "a" -> (tensor<f32>, tensor<f32>) {
// CHECK-NEXT:        %e = hlo.exponential %d
// CHECK-NEXT:        %g = hlo.multiply %e, %w
// CHECK-NEXT:        tpu.yield %e, %g
// CHECK-NEXT:      }
// CHECK-NEXT:      %s = hlo.add %h, %d
// CHECK-NEXT:      %t = hlo.add %s, %k
// CHECK-NEXT:      tpu.yield %t
// CHECK-NOT:     tpu.outside_compilation "b"
func.func @middle_cluster_joins_its_producer(%a: tensor<f32>, %b: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>, [%b] as %w: tensor<f32>) {n = 1 : i64} {
    %d = hlo.negate %x : tensor<f32>
    %h = tpu.outside_compilation "a" -> (tensor<f32>) {
      %e = hlo.exponential %d : tensor<f32>
      tpu.yield %e : tensor<f32>
    }
    %s = hlo.add %h, %d : tensor<f32>
    %k = tpu.outside_compilation "b" -> (tensor<f32>) {
      %g = hlo.multiply %h, %w : tensor<f32>
      tpu.yield %g : tensor<f32>
    }
    %t = hlo.add %s, %k : tensor<f32>
    tpu.yield %t : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A cluster that needs a device value (%s) or has a side effect keeps its
// own round trip.
// CHECK-LABEL: func @clusters_that_do_not_join
// CHECK:         tpu.outside_compilation "a" -> (tensor<f32>)
// CHECK:         tpu.outside_compilation "b" -> (tensor<f32>)
// CHECK:         tpu.outside_compilation "c" -> (tensor<f32>) {
func.func @clusters_that_do_not_join(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %d = hlo.negate %x : tensor<f32>
    %h = tpu.outside_compilation "a" -> (tensor<f32>) {
      %e = hlo.exponential %d : tensor<f32>
      tpu.yield %e : tensor<f32>
    }
    %s = hlo.add %h, %d : tensor<f32>
    %k = tpu.outside_compilation "b" -> (tensor<f32>) {
      %g = hlo.multiply %h, %s : tensor<f32>
      tpu.yield %g : tensor<f32>
    }
    %p = tpu.outside_compilation "c" -> (tensor<f32>) {
      hlo.print (%h) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      %q = hlo.exponential %h : tensor<f32>
      tpu.yield %q : tensor<f32>
    }
    %t = hlo.add %s, %k : tensor<f32>
    %u = hlo.add %t, %p : tensor<f32>
    tpu.yield %u : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A constant the joining cluster uses, defined between the two clusters,
// moves up before the merged cluster (its definition still comes first).
// CHECK-LABEL: func @joining_cluster_with_a_later_constant
// CHECK:         %d = hlo.negate %x
// CHECK-NEXT:    %two = hlo.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:    %h, %k = tpu.outside_compilation "a" -> (tensor<f32>, tensor<f32>) {
// CHECK-NEXT:      %e = hlo.exponential %d
// CHECK-NEXT:      %g = hlo.multiply %e, %two
// CHECK-NEXT:      tpu.yield %e, %g
// CHECK-NEXT:    }
// CHECK-NEXT:    %s = hlo.add %h, %d
// CHECK-NEXT:    %t = hlo.add %s, %k
func.func @joining_cluster_with_a_later_constant(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %d = hlo.negate %x : tensor<f32>
    %h = tpu.outside_compilation "a" -> (tensor<f32>) {
      %e = hlo.exponential %d : tensor<f32>
      tpu.yield %e : tensor<f32>
    }
    %s = hlo.add %h, %d : tensor<f32>
    %two = hlo.constant dense<2.000000e+00> : tensor<f32>
    %k = tpu.outside_compilation "b" -> (tensor<f32>) {
      %g = hlo.multiply %h, %two : tensor<f32>
      tpu.yield %g : tensor<f32>
    }
    %t = hlo.add %s, %k : tensor<f32>
    tpu.yield %t : tensor<f32>
  }
  func.return %r : tensor<f32>
}
