;; A two-round commit coordinator: the application's one invoke runs both rounds of a
;; two-phase commit, the case the Push paper (Bhargava, Mafla and Riedl, "Communication in the
;; Raid Distributed Database System", Appendix A) gives for collecting several messages per
;; system call.
;;
;; invoke arguments (little-endian), 28 + 8n bytes:
;;   n               u32       participants, 1..=64
;;   txn             u64       transaction id
;;   vote_timeout    u64       ns to wait for the votes
;;   ack_timeout     u64       ns to wait for the acknowledgements
;;   participants    n x u64   packed txcast addresses
;;
;; Messages, 9 bytes each: kind u8, then txn u64.
;;   coordinator -> participant:  1 PREPARE, 2 COMMIT, 3 ABORT
;;   participant -> coordinator:  4 VOTE_YES, 5 VOTE_NO, 6 ACK
;; A message that is short, of another transaction, from a non-participant or of a kind not
;; expected in the current round is ignored.
;;
;; Round 1: invoke arms timer 1 (vote_timeout) and sends PREPARE to every participant.
;; Votes are collected; all YES -> COMMIT; a NO or timer 1 -> ABORT.
;; Round 2: the decision is sent to every participant, timer 2 (ack_timeout) is armed and ACKs
;; are collected; when all are in, or timer 2 fires, the invocation completes.
;;
;; Completion: status 0 = committed, 1 = aborted; result = 8 bytes, u64 mask of the
;; participants (bit i = i-th in the list) whose ACK arrived. Bad arguments: invoke returns -1;
;; timer 1 refused by the host: invoke returns -2 (before any send). Either ends the
;; invocation with that status.
(module
  (import "txcast" "send" (func $send (param i64 i32 i32) (result i32)))
  (import "txcast" "arm_timer" (func $arm_timer (param i64 i64) (result i32)))
  (import "txcast" "cancel_timer" (func $cancel_timer (param i64) (result i32)))
  (import "txcast" "complete" (func $complete (param i32 i32 i32)))

  ;; Memory map: 0x0000 outgoing message (9 bytes), 0x0010 result (8 bytes),
  ;; 0x0100 participant list (64 x 8 bytes), 0x1000 input buffer (4096 bytes).
  (memory (export "memory") 1)
  (global (export "input_ptr") i32 (i32.const 0x1000))
  (global (export "input_cap") i32 (i32.const 0x1000))
  (global $OUT i32 (i32.const 0x0000))
  (global $RESULT i32 (i32.const 0x0010))
  (global $PARTS i32 (i32.const 0x0100))

  (global $phase (mut i32) (i32.const 0))     ;; 0 idle, 1 collecting votes, 2 collecting acks
  (global $txn (mut i64) (i64.const 0))
  (global $n (mut i32) (i32.const 0))
  (global $all (mut i64) (i64.const 0))       ;; mask with a bit per participant
  (global $votes (mut i64) (i64.const 0))     ;; YES votes received
  (global $acks (mut i64) (i64.const 0))      ;; ACKs received
  (global $decision (mut i32) (i32.const 0))  ;; 2 COMMIT or 3 ABORT
  (global $ack_timeout (mut i64) (i64.const 0))

  ;; Sends message `kind` of the current transaction to every participant. A refused send is
  ;; treated like a lost message: the round's timer covers it.
  (func $broadcast (param $kind i32)
    (local $i i32)
    (i32.store8 (global.get $OUT) (local.get $kind))
    (i64.store (i32.add (global.get $OUT) (i32.const 1)) (global.get $txn))
    (loop $each
      (drop (call $send
        (i64.load (i32.add (global.get $PARTS) (i32.shl (local.get $i) (i32.const 3))))
        (global.get $OUT) (i32.const 9)))
      (local.tee $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $each (i32.lt_u (global.get $n)))))

  ;; The index of `src` in the participant list, or -1.
  (func $find (param $src i64) (result i32)
    (local $i i32)
    (block $none
      (loop $each
        (br_if $none (i32.ge_u (local.get $i) (global.get $n)))
        (if (i64.eq (local.get $src)
                    (i64.load (i32.add (global.get $PARTS) (i32.shl (local.get $i) (i32.const 3)))))
          (then (return (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (i32.const -1))

  ;; Ends round 1 with `kind` (2 COMMIT or 3 ABORT) and starts round 2.
  (func $decide (param $kind i32)
    (drop (call $cancel_timer (i64.const 1)))
    (global.set $decision (local.get $kind))
    (global.set $phase (i32.const 2))
    (global.set $acks (i64.const 0))
    (if (i32.ne (call $arm_timer (global.get $ack_timeout) (i64.const 2)) (i32.const 0))
      ;; no timer for round 2: send the decision and complete without waiting for ACKs
      (then (call $broadcast (local.get $kind)) (call $finish) (return)))
    (call $broadcast (local.get $kind)))

  ;; Ends round 2: completes with the decision and the mask of ACKs received.
  (func $finish
    (drop (call $cancel_timer (i64.const 2)))
    (global.set $phase (i32.const 0))
    (i64.store (global.get $RESULT) (global.get $acks))
    (call $complete
      (select (i32.const 0) (i32.const 1) (i32.eq (global.get $decision) (i32.const 2)))
      (global.get $RESULT) (i32.const 8)))

  (func (export "invoke") (param $args i32) (param $len i32) (result i32)
    (local $n i32)
    (if (i32.lt_u (local.get $len) (i32.const 28)) (then (return (i32.const -1))))
    (local.set $n (i32.load (local.get $args)))
    (if (i32.or (i32.eqz (local.get $n)) (i32.gt_u (local.get $n) (i32.const 64)))
      (then (return (i32.const -1))))
    (if (i32.lt_u (local.get $len) (i32.add (i32.const 28) (i32.shl (local.get $n) (i32.const 3))))
      (then (return (i32.const -1))))
    (global.set $n (local.get $n))
    (global.set $txn (i64.load offset=4 (local.get $args)))
    (global.set $ack_timeout (i64.load offset=20 (local.get $args)))
    (memory.copy (global.get $PARTS) (i32.add (local.get $args) (i32.const 28))
                 (i32.shl (local.get $n) (i32.const 3)))
    (global.set $all
      (if (result i64) (i32.eq (local.get $n) (i32.const 64))
        (then (i64.const -1))
        (else (i64.sub (i64.shl (i64.const 1) (i64.extend_i32_u (local.get $n))) (i64.const 1)))))
    (global.set $votes (i64.const 0))
    (global.set $acks (i64.const 0))
    (if (i32.ne (call $arm_timer (i64.load offset=12 (local.get $args)) (i64.const 1)) (i32.const 0))
      (then (return (i32.const -2))))
    (global.set $phase (i32.const 1))
    (call $broadcast (i32.const 1))
    (i32.const 0))

  (func (export "on_message") (param $src i64) (param $ptr i32) (param $len i32)
    (local $kind i32) (local $idx i32) (local $bit i64)
    (if (i32.lt_u (local.get $len) (i32.const 9)) (then (return)))
    (if (i64.ne (i64.load offset=1 (local.get $ptr)) (global.get $txn)) (then (return)))
    (local.set $idx (call $find (local.get $src)))
    (if (i32.lt_s (local.get $idx) (i32.const 0)) (then (return)))
    (local.set $kind (i32.load8_u (local.get $ptr)))
    (local.set $bit (i64.shl (i64.const 1) (i64.extend_i32_u (local.get $idx))))
    (if (i32.eq (global.get $phase) (i32.const 1))
      (then
        (if (i32.eq (local.get $kind) (i32.const 4))
          (then
            (global.set $votes (i64.or (global.get $votes) (local.get $bit)))
            (if (i64.eq (global.get $votes) (global.get $all))
              (then (call $decide (i32.const 2))))))
        (if (i32.eq (local.get $kind) (i32.const 5))
          (then (call $decide (i32.const 3))))
        (return)))
    (if (i32.and (i32.eq (global.get $phase) (i32.const 2)) (i32.eq (local.get $kind) (i32.const 6)))
      (then
        (global.set $acks (i64.or (global.get $acks) (local.get $bit)))
        (if (i64.eq (global.get $acks) (global.get $all))
          (then (call $finish))))))

  (func (export "on_timer") (param $token i64)
    (if (i32.and (i32.eq (global.get $phase) (i32.const 1)) (i64.eq (local.get $token) (i64.const 1)))
      (then (call $decide (i32.const 3)) (return)))
    (if (i32.and (i32.eq (global.get $phase) (i32.const 2)) (i64.eq (local.get $token) (i64.const 2)))
      (then (call $finish))))
)
