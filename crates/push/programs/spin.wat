;; A bad program: invoke loops forever. The fuel budget stops it.
(module
  (memory (export "memory") 1)
  (func (export "invoke") (param i32 i32) (result i32)
    (loop $forever (br $forever))
    (i32.const 0))
)
