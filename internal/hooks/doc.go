// Package hooks holds the functions registered on a context through its
// AfterFunc method, the one context.AfterFunc and the context package's
// child contexts look for, for the contexts idem makes itself: the
// operation's (idem's run context) and the gateway's upstream call's.
//
// A child made by the context package from a *context.cancelCtx goes in
// that context's map of children (a map per parent); from a context with
// an AfterFunc method it registers a function instead. A List keeps the
// first two functions in place, with no allocation.
package hooks
