;; Bad guest: returns {"state": null} with the key's length in a two-byte head where one
;; byte would do: valid CBOR, not canonical (step.output_malformed).
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "\d9\d9\f7\a1\78\05state\f6")
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "step") (param i32 i32) (result i64) (i64.const 12)))
