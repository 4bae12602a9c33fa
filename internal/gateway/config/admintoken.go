package config

import (
	"errors"
	"fmt"
	"strings"
)

// MinAdminTokenBytes is the shortest admin_token accepted: the token opens
// stored responses, release and cleanup to whoever reaches the admin
// listener, so it must not be guessable.
const MinAdminTokenBytes = 16

// ErrWeakAdminToken: admin_token is too short or a placeholder of the
// documentation's examples.
var ErrWeakAdminToken = errors.New("weak admin token")

// adminTokenPlaceholders are the admin tokens the documentation, examples
// and manifests have shown, which a copied example would otherwise leave
// in production; placeholderWords mark a token as one wherever they stand
// in it (change-me-to-a-long-random-token, change-me-please, ...). Both
// compared without case.
var (
	adminTokenPlaceholders = []string{
		"change-me-to-a-long-random-token", "your-admin-token", "admin_token", "admin-token", "...",
	}
	placeholderWords = []string{"change-me", "changeme", "change_me", "replace-me", "replaceme"}
)

// tokenFix is how to make a good token, named in every refusal.
const tokenFix = "set admin_token (or IDEM_ADMIN_TOKEN) to at least 16 random bytes, e.g. `openssl rand -base64 32`"

// checkAdminToken refuses an admin token shorter than MinAdminTokenBytes
// or one that is (or contains) a documented placeholder.
func checkAdminToken(tok string) error {
	low := strings.ToLower(strings.TrimSpace(tok))
	for _, p := range adminTokenPlaceholders {
		if low == p {
			return fmt.Errorf("admin_token: %w: it is the placeholder %q of the examples; %s", ErrWeakAdminToken, p, tokenFix)
		}
	}
	for _, p := range placeholderWords {
		if strings.Contains(low, p) {
			return fmt.Errorf("admin_token: %w: it is (or contains) the placeholder %q of the examples; %s", ErrWeakAdminToken, p, tokenFix)
		}
	}
	if len(tok) < MinAdminTokenBytes {
		return fmt.Errorf("admin_token: %w: %d bytes, fewer than %d; %s", ErrWeakAdminToken, len(tok), MinAdminTokenBytes, tokenFix)
	}
	return nil
}
