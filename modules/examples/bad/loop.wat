;; Bad guest: loops forever. Fuel stops it (step.fuel_exhausted).
(module
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "step") (param i32 i32) (result i64)
    (loop $forever (br $forever))
    unreachable))
