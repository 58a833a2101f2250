;; A bad program: invoke loads a word beyond the end of its one-page memory.
(module
  (memory (export "memory") 1)
  (func (export "invoke") (param i32 i32) (result i32)
    (i32.load (i32.const 65534)))
)
