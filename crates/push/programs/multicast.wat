;; Push multicast: the sample program of Appendix B of Bhargava, Mafla and Riedl,
;; "Communication in the Raid Distributed Database System", in WebAssembly.
;;
;; invoke arguments (little-endian):
;;   count  u32                 number of destinations
;;   dests  count x u64         packed txcast addresses
;;   msg    the remaining bytes the message
;;
;; Sends the message to each destination in turn, straight from the input buffer (no copy),
;; and completes with status = the number of sends the host accepted, no result bytes.
;; Arguments too short for their count: invoke returns -1, which ends the invocation with
;; status -1.
(module
  (import "txcast" "send" (func $send (param i64 i32 i32) (result i32)))
  (import "txcast" "complete" (func $complete (param i32 i32 i32)))

  (memory (export "memory") 1)
  ;; The whole page is the input buffer: the program keeps no state between calls.
  (global (export "input_ptr") i32 (i32.const 0))
  (global (export "input_cap") i32 (i32.const 65536))

  (func (export "invoke") (param $args i32) (param $len i32) (result i32)
    (local $cnt i32) (local $next i32) (local $msg i32) (local $msglen i32) (local $sent i32)
    (if (i32.lt_u (local.get $len) (i32.const 4))
      (then (return (i32.const -1))))
    (local.set $cnt (i32.load (local.get $args)))
    ;; count <= (len - 4) / 8, so that the address list fits the arguments.
    (if (i32.gt_u (local.get $cnt)
                  (i32.shr_u (i32.sub (local.get $len) (i32.const 4)) (i32.const 3)))
      (then (return (i32.const -1))))
    (local.set $next (i32.add (local.get $args) (i32.const 4)))
    (local.set $msg (i32.add (local.get $next) (i32.shl (local.get $cnt) (i32.const 3))))
    (local.set $msglen (i32.sub (i32.add (local.get $args) (local.get $len)) (local.get $msg)))
    (block $done
      (br_if $done (i32.eqz (local.get $cnt)))
      (loop $loop
        ;; deliver the message to the next destination; count the accepted sends
        (if (i32.eqz (call $send (i64.load (local.get $next)) (local.get $msg) (local.get $msglen)))
          (then (local.set $sent (i32.add (local.get $sent) (i32.const 1)))))
        ;; step to the next destination address
        (local.set $next (i32.add (local.get $next) (i32.const 8)))
        ;; decrement the count of destinations, continue while some are left
        (local.tee $cnt (i32.sub (local.get $cnt) (i32.const 1)))
        (br_if $loop)))
    (call $complete (local.get $sent) (i32.const 0) (i32.const 0))
    (i32.const 0))
)
