;; A counting loop for measuring the interpreter: each iteration executes exactly 12 wasm
;; operators (the size of the loop of the paper's Appendix B program), one of them a memory
;; load.
;;
;; invoke arguments: n u32, the iteration count. Completes with status = the sum of the words
;; loaded (so the loop's work is observable), no result bytes.
(module
  (import "txcast" "complete" (func $complete (param i32 i32 i32)))

  (memory (export "memory") 1)
  (global (export "input_ptr") i32 (i32.const 0))
  (global (export "input_cap") i32 (i32.const 16))

  (func (export "invoke") (param $args i32) (param $len i32) (result i32)
    (local $n i32) (local $acc i32)
    (if (i32.lt_u (local.get $len) (i32.const 4))
      (then (return (i32.const -1))))
    (local.set $n (i32.load (local.get $args)))
    (block $done
      (br_if $done (i32.eqz (local.get $n)))
      (loop $loop
        ;; acc += memory[n & 1020]                      7 operators
        local.get $acc
        local.get $n
        i32.const 1020
        i32.and
        i32.load
        i32.add
        local.set $acc
        ;; n -= 1, continue while n != 0                 5 operators
        local.get $n
        i32.const 1
        i32.sub
        local.tee $n
        br_if $loop))
    (call $complete (local.get $acc) (i32.const 0) (i32.const 0))
    (i32.const 0))
)
