;; Component-ABI probe: `step` returns its input unchanged (see echo.wat). The core module
;; has a bump realloc that grows memory and traps when the host's memory limit refuses.
(component
  (core module $m
    (memory (export "memory") 1)
    (global $top (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $start i32)
      (local $have i32)
      (local.set $start (global.get $top))
      (global.set $top (i32.add (local.get $start) (local.get 3)))
      (local.set $have (i32.mul (memory.size) (i32.const 65536)))
      (if (i32.gt_u (global.get $top) (local.get $have))
        (then
          (if (i32.eq
                (memory.grow
                  (i32.div_u
                    (i32.add (i32.sub (global.get $top) (local.get $have)) (i32.const 65535))
                    (i32.const 65536)))
                (i32.const -1))
            (then unreachable))))
      (local.get $start))
    ;; returns a pointer to (ptr, len) of the result list
    (func (export "step") (param $ptr i32) (param $len i32) (result i32)
      (i32.store (i32.const 0) (local.get $ptr))
      (i32.store (i32.const 4) (local.get $len))
      (i32.const 0)))
  (core instance $i (instantiate $m))
  (type $bytes (list u8))
  (func (export "step") (param "input" $bytes) (result $bytes)
    (canon lift (core func $i "step")
      (memory (core memory $i "memory"))
      (realloc (core func $i "realloc")))))
