;; Push multicast with one hook call: the arguments and completion of multicast.wat, but the
;; whole destination list goes to the host in a single `send_many`, so the program crosses
;; into the host once per invocation instead of once per destination.
;;
;; invoke arguments (little-endian):
;;   count  u32                 number of destinations
;;   dests  count x u64         packed txcast addresses
;;   msg    the remaining bytes the message
;;
;; Completes with status = the number of sends the host accepted, no result bytes. Arguments
;; too short for their count: invoke returns -1.
(module
  (import "txcast" "send_many" (func $send_many (param i32 i32 i32 i32) (result i32)))
  (import "txcast" "complete" (func $complete (param i32 i32 i32)))

  (memory (export "memory") 1)
  (global (export "input_ptr") i32 (i32.const 0))
  (global (export "input_cap") i32 (i32.const 65536))

  (func (export "invoke") (param $args i32) (param $len i32) (result i32)
    (local $cnt i32) (local $msg i32)
    (if (i32.lt_u (local.get $len) (i32.const 4))
      (then (return (i32.const -1))))
    (local.set $cnt (i32.load (local.get $args)))
    (if (i32.gt_u (local.get $cnt)
                  (i32.shr_u (i32.sub (local.get $len) (i32.const 4)) (i32.const 3)))
      (then (return (i32.const -1))))
    (local.set $msg (i32.add (i32.add (local.get $args) (i32.const 4))
                             (i32.shl (local.get $cnt) (i32.const 3))))
    (call $complete
      (call $send_many
        (i32.add (local.get $args) (i32.const 4))
        (local.get $cnt)
        (local.get $msg)
        (i32.sub (i32.add (local.get $args) (local.get $len)) (local.get $msg)))
      (i32.const 0) (i32.const 0))
    (i32.const 0))
)
