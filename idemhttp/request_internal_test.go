package idemhttp

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestHandlerRequest: the handler's request has the client's header as
// Clone then Set would make it (the request ID and token set, the
// client's token dropped), whether its values fit the inline array or
// not, with a body or without; appending to one field's values never
// reaches another's, and the body reads again through GetBody.
func TestHandlerRequest(t *testing.T) {
	m := &middleware{reqIDHeader: "X-Request-Id"}
	for _, fields := range []int{0, inlineValues - 4, inlineValues - 2, inlineValues, 3 * inlineValues} {
		for _, body := range []string{"", `{"a":1}`} {
			r := httptest.NewRequest("POST", "/x", strings.NewReader(body))
			r.Header[TokenHeader] = []string{"999"}
			r.Header["X-Nil"] = nil
			for i := range fields {
				r.Header.Add(fmt.Sprintf("X-F%d", i%7), fmt.Sprint(i))
			}
			before := r.Header.Clone()
			want := r.Header.Clone()
			want.Set("X-Request-Id", "rid")
			want.Set(TokenHeader, "42")
			var b []byte
			if body != "" {
				b = []byte(body)
			}
			fr := m.handlerRequest(context.Background(), r, new(runParts), b, "rid", 42, true)
			if !reflect.DeepEqual(fr.Header, want) {
				t.Fatalf("%d fields, body %q: header %v, want %v", fields, body, fr.Header, want)
			}
			fr.Header["X-Request-Id"] = append(fr.Header["X-Request-Id"], "more")
			for k, vs := range fr.Header {
				if k != "X-Request-Id" && slices.Contains(vs, "more") {
					t.Fatalf("%d fields: an append to one field reached %s: %v", fields, k, vs)
				}
			}
			if !reflect.DeepEqual(r.Header, before) {
				t.Fatalf("%d fields: the client's header changed: %v", fields, r.Header)
			}
			if body == "" {
				continue
			}
			got, _ := io.ReadAll(fr.Body)
			rc, err := fr.GetBody()
			again, _ := io.ReadAll(rc)
			if err != nil || string(got) != body || string(again) != body {
				t.Fatalf("body %q, again %q (%v)", got, again, err)
			}
		}
	}
}
