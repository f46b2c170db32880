package pseudo_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/pseudo"
)

func TestValue(t *testing.T) {
	k, err := pseudo.New([]byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := pseudo.New([]byte("0123456789abcdeF"))
	p := k.Value("acme", "user", "alice@example.com")
	if len(p) != pseudo.Len || !strings.HasPrefix(p, pseudo.Prefix) || strings.Contains(p, "alice") {
		t.Fatalf("pseudonym %q: want %d bytes after %q, no trace of the value", p, pseudo.Len, pseudo.Prefix)
	}
	if again := k.Value("acme", "user", "alice@example.com"); again != p {
		t.Errorf("not deterministic: %q then %q", p, again)
	}
	// Another node with the same secret makes the same pseudonym.
	same, _ := pseudo.New([]byte("0123456789abcdef"))
	if q := same.Value("acme", "user", "alice@example.com"); q != p {
		t.Errorf("a second keyer of one secret: %q, want %q", q, p)
	}
	for name, q := range map[string]string{
		"another tenant":  k.Value("globex", "user", "alice@example.com"),
		"another part":    k.Value("acme", "ip", "alice@example.com"),
		"another value":   k.Value("acme", "user", "alice@example.co"),
		"another secret":  other.Value("acme", "user", "alice@example.com"),
		"parts run on":    k.Value("acmeuser", "", "alice@example.com"),
		"tenant into key": k.Value("acm", "euser", "alice@example.com"),
	} {
		if q == p {
			t.Errorf("%s gives the same pseudonym %q", name, p)
		}
	}
	var off *pseudo.Keyer
	if got := off.Value("acme", "user", "alice"); got != "alice" || off.On() {
		t.Errorf("nil keyer: %q, on %v; want the value, off", got, off.On())
	}
	if _, err := pseudo.New([]byte("short")); err == nil {
		t.Error("a 5-byte secret was taken")
	}
}

func BenchmarkValue(b *testing.B) {
	k, _ := pseudo.New([]byte("a-benchmark-secret-32-bytes-long"))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k.Value("acme", "user", "alice@example.com")
		}
	})
}

// TestIs: Is knows Value's pseudonyms, and nothing a person's key is.
func TestIs(t *testing.T) {
	k, _ := pseudo.New([]byte("0123456789abcdef"))
	for _, v := range []string{"alice@example.com", "", "x", "RAWBLOCKKEY", "10.0.0.1"} {
		if p := k.Value("acme", "user", v); !pseudo.Is(p) {
			t.Errorf("Is(%q) = false for Value's pseudonym of %q", p, v)
		}
	}
	p := k.Value("acme", "user", "alice")
	for _, s := range []string{"alice", "", "~", p[1:], p + "A", "-" + p[1:], p[:22] + "!", p[:22] + "=", "~alice@example.com____"} {
		if pseudo.Is(s) {
			t.Errorf("Is(%q) = true, want false", s)
		}
	}
}
