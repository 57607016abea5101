;; Core-ABI probe: computes a NaN from a NaN with a payload and returns its bit pattern as
;; the state (a CBOR uint). With NaN canonicalization the bits are 0x7ff8000000000000 on
;; every machine; without it the payload would leak through (0x7ff8000000000004 on x86).
(module
  (memory (export "memory") 1)
  ;; d9d9f7 {"state": h'd9d9f7 1b <8 bytes>'}: the 8 bytes start at offset 15.
  (data (i32.const 0) "\d9\d9\f7\a1\65state\4c\d9\d9\f7\1b")
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "step") (param $ptr i32) (param $len i32) (result i64)
    (local $bits i64)
    (local $i i32)
    (local.set $bits
      (i64.reinterpret_f64
        (f64.add (f64.const nan:0x4) (f64.convert_i32_u (local.get $len)))))
    ;; big-endian, as CBOR wants
    (loop $byte
      (i64.store8
        (i32.add (i32.const 15) (local.get $i))
        (i64.shr_u (local.get $bits) (i64.extend_i32_u (i32.sub (i32.const 56) (i32.mul (local.get $i) (i32.const 8))))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $byte (i32.lt_u (local.get $i) (i32.const 8))))
    (i64.const 23)))
