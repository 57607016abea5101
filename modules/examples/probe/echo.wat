;; Core-ABI probe: returns its input unchanged, so a test can hand the host any output
;; bytes it likes (edges of output_bytes_max, effect and event counts, malformed envelopes).
;; alloc grows memory to fit the input and traps when the host's memory limit refuses.
(module
  (memory (export "memory") 1)
  (func (export "alloc") (param $len i32) (result i32)
    (local $need i32)
    (local $have i32)
    (local.set $need (i32.add (i32.const 1024) (local.get $len)))
    (local.set $have (i32.mul (memory.size) (i32.const 65536)))
    (if (i32.gt_u (local.get $need) (local.get $have))
      (then
        (if (i32.eq
              (memory.grow
                (i32.div_u
                  (i32.add (i32.sub (local.get $need) (local.get $have)) (i32.const 65535))
                  (i32.const 65536)))
              (i32.const -1))
          (then unreachable))))
    (i32.const 1024))
  (func (export "step") (param $ptr i32) (param $len i32) (result i64)
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
      (i64.extend_i32_u (local.get $len)))))
