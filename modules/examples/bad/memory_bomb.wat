;; Bad guest: grows its memory 1 MiB at a time until the host's limit refuses, then traps
;; the way an allocator that cannot get memory does (step.memory_exhausted).
(module
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "step") (param i32 i32) (result i64)
    (loop $more
      (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    unreachable))
