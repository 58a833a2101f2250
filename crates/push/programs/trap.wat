;; A bad program: invoke executes `unreachable`; on_timer divides by zero.
(module
  (memory (export "memory") 1)
  (func (export "invoke") (param i32 i32) (result i32)
    unreachable)
  (func (export "on_timer") (param $token i64)
    (drop (i64.div_u (i64.const 1) (i64.sub (local.get $token) (local.get $token)))))
)
