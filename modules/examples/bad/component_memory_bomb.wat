;; Bad guest (component ABI): grows memory until refused, then traps
;; (step.memory_exhausted).
(component
  (core module $m
    (memory (export "memory") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
    (func (export "step") (param i32 i32) (result i32)
      (loop $more
        (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
      unreachable))
  (core instance $i (instantiate $m))
  (type $bytes (list u8))
  (func (export "step") (param "input" $bytes) (result $bytes)
    (canon lift (core func $i "step")
      (memory (core memory $i "memory"))
      (realloc (core func $i "realloc")))))
