package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/memory"
)

// A retried charge runs once; the retry gets the first outcome back.
func ExampleEngine_Do() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	ctx := context.Background()

	charges := 0
	charge := func(ctx context.Context) ([]byte, error) {
		charges++
		return []byte(`{"charge":"ch_1","amount":1000}`), nil
	}
	input := map[string]any{"order": "ORD-123", "amount": 1000}
	fp, _ := idem.HashJSON(input)
	call := idem.Call{Scope: "charge_customer", Key: "charge-ORD-123", Fingerprint: fp}

	first, _ := eng.Do(ctx, call, charge)
	retry, _ := eng.Do(ctx, call, charge)
	fmt.Println(string(first.Value), first.Replayed)
	fmt.Println(string(retry.Value), retry.Replayed)
	fmt.Println("charges:", charges)

	// The same key with another input is a conflict, never a replay.
	call.Fingerprint, _ = idem.HashJSON(map[string]any{"order": "ORD-123", "amount": 9999})
	_, err := eng.Do(ctx, call, charge)
	fmt.Println(errors.Is(err, idem.ErrFingerprintMismatch))
	// Output:
	// {"charge":"ch_1","amount":1000} false
	// {"charge":"ch_1","amount":1000} true
	// charges: 1
	// true
}

// The S3 task queue's idempotent submit: every submission of a key gets the same task
// ID, scoped by task type.
func ExampleEngine_Do_submit() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	ctx := context.Background()

	next := 0
	submit := func(taskType, key string, input any) (string, error) {
		fp, err := idem.HashJSON(input)
		if err != nil {
			return "", err
		}
		res, err := eng.Do(ctx, idem.Call{Scope: taskType, Key: key, Fingerprint: fp},
			func(ctx context.Context) ([]byte, error) {
				next++
				return fmt.Appendf(nil, "task-%d", next), nil
			})
		return string(res.Value), err
	}
	a, _ := submit("charge_customer", "charge-ORD-123", map[string]int{"amount": 1000})
	b, _ := submit("charge_customer", "charge-ORD-123", map[string]int{"amount": 1000})
	c, _ := submit("send_email", "charge-ORD-123", map[string]int{"amount": 1000})
	_, err := submit("charge_customer", "charge-ORD-123", map[string]int{"amount": 5})
	fmt.Println(a, b, c)
	fmt.Println("IdempotencyConflict:", errors.Is(err, idem.ErrFingerprintMismatch))
	// Output:
	// task-1 task-1 task-2
	// IdempotencyConflict: true
}

// Key order and white space do not change a JSON fingerprint.
func ExampleHashJSONBytes() {
	a, _ := idem.HashJSONBytes([]byte(`{"amount": 1000, "currency": "eur"}`))
	b, _ := idem.HashJSONBytes([]byte(`{"currency":"eur","amount":1000}`))
	c, _ := idem.HashJSONBytes([]byte(`{"currency":"eur","amount":1001}`))
	fmt.Println(a == b, a == c)
	// Output: true false
}

// The mobile app checks only the fields that make an answer what it is.
func ExampleHashJSONFields() {
	a, _ := idem.HashJSONFields([]byte(`{"stepId":"s1","questionId":"q1","answerValue":3,"clientTs":1}`), "stepId", "questionId", "answerValue")
	b, _ := idem.HashJSONFields([]byte(`{"clientTs":2,"answerValue":3,"questionId":"q1","stepId":"s1"}`), "stepId", "questionId", "answerValue")
	fmt.Println(a == b)
	// Output: true
}

func ExampleCanonicalJSON() {
	out, _ := idem.CanonicalJSON([]byte(`{ "b": [1, 2.0, "\u0041"], "a": {"y": null, "x": true} }`))
	fmt.Println(string(out))
	// Output: {"a":{"x":true,"y":null},"b":[1,2.0,"A"]}
}

func ExampleHashBytes() {
	fmt.Println(idem.HashBytes([]byte("hello")))
	// Output: sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824
}

func ExampleValidateKey() {
	k, err := idem.ValidateKey("  550e8400-e29b-41d4-a716-446655440000 ", 0)
	fmt.Printf("%q %v\n", k, err)
	_, err = idem.ValidateKey("   ", 0)
	fmt.Println(errors.Is(err, idem.ErrInvalidKey), err)
	// Output:
	// "550e8400-e29b-41d4-a716-446655440000" <nil>
	// true idem: invalid idempotency key: key is empty
}

// The payments API took the charge and never answered: the operation says
// its outcome is unknown. Retries neither run it again nor pretend nothing
// happened; once someone has checked the charge, an operator releases the
// key.
func ExampleErrOutcomeUnknown() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	ctx := context.Background()
	call := idem.Call{Scope: "charges", Key: "charge-ORD-7", RequestID: "req-1"}

	_, err := eng.Do(ctx, call, func(ctx context.Context) ([]byte, error) {
		return nil, fmt.Errorf("payments API: no answer within 5s: %w", idem.ErrOutcomeUnknown)
	})
	fmt.Println(errors.Is(err, idem.ErrOutcomeUnknown))

	call.RequestID = "req-2"
	_, err = eng.Do(ctx, call, func(ctx context.Context) ([]byte, error) {
		panic("never runs")
	})
	var ce *idem.ConflictError
	if errors.As(err, &ce) {
		fmt.Println(ce.Type, "first request:", ce.Record.RequestID)
	}

	// The charge did not go through: free the key for the next retry.
	fmt.Println(eng.Release(ctx, "charges", "charge-ORD-7"))
	res, err := eng.Do(ctx, call, func(ctx context.Context) ([]byte, error) {
		return []byte("ch_2"), nil
	})
	fmt.Println(string(res.Value), err)
	// Output:
	// true
	// outcome_unknown first request: req-1
	// <nil>
	// ch_2 <nil>
}

// The fencing token of the reservation goes upstream with the call, so that
// the payments API can refuse a holder that lost its lease to a retry.
func ExampleTokenFromContext() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	_, _ = eng.Do(context.Background(), idem.Call{Scope: "charges", Key: "charge-ORD-8"},
		func(ctx context.Context) ([]byte, error) {
			tok, ok := idem.TokenFromContext(ctx)
			// req.Header.Set("Idempotency-Token", strconv.FormatUint(tok, 10))
			fmt.Println(ok, tok != 0)
			return nil, nil
		})
	// Output:
	// true true
}

// Count the reservations the engine frees after their answer was lost, for
// an alert: a steady rate means the store's connections break mid-call.
func ExampleWithOnFreed() {
	var freed atomic.Int64 // or a Prometheus counter
	eng := idem.New(memory.New(), idem.Policy{}, idem.WithOnFreed(func(scope string) {
		freed.Add(1)
	}))
	defer eng.Close()
	res, _ := eng.Do(context.Background(), idem.Call{Scope: "charges", Key: "charge-ORD-9"},
		func(context.Context) ([]byte, error) { return []byte("ch_1"), nil })
	fmt.Println(string(res.Value), freed.Load())
	// Output:
	// ch_1 0
}

// An operator's tool reads a key's record with Lookup and asks the engine
// what it means: OutcomeUnknown tells a call whose outcome is unknown from
// a plain failure, and Releasable says whether Release would free it.
func ExampleEngine_Lookup() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	ctx := context.Background()
	_, _ = eng.Do(ctx, idem.Call{Scope: "charges", Key: "charge-ORD-9"}, func(ctx context.Context) ([]byte, error) {
		return nil, fmt.Errorf("upstream: connection reset after the request was sent: %w", idem.ErrOutcomeUnknown)
	})

	rec, err := eng.Lookup(ctx, "charges", "charge-ORD-9")
	if err != nil {
		panic(err)
	}
	fmt.Println(rec.State, rec.OutcomeUnknown, string(rec.Value))
	fmt.Println("releasable:", rec.Releasable())
	// Output:
	// failed true upstream: connection reset after the request was sent: idem: the operation started and its outcome is unknown
	// releasable: true
}
