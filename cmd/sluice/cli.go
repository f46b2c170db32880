package main

// The operator's CLI over a running server's HTTP API (docs/api.md):
// `sluice check` (cli_check.go), `sluice tenants`, `sluice keys` and
// `sluice block` (cli_admin.go). This file holds what they share: the
// server's address, the key sent, the calls and the errors they name.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// Exit codes of the CLI's commands, for scripts: a check denied is 1, any
// error 2 (main's, for every command).
const (
	exitDenied = 1
	exitError  = 2
)

// errDenied is a check's denial: the command printed the decision, and
// exits 1 without a message.
var errDenied = errors.New("denied")

// exitCode prints err to stderr, unless it is a denial or was logged
// already (serve's, in its log's format), and returns the process's exit
// code.
func exitCode(err error, stderr io.Writer) int {
	if errors.Is(err, errDenied) {
		return exitDenied
	}
	if !errors.As(err, new(logged)) {
		fmt.Fprintln(stderr, "sluice:", err)
	}
	return exitError
}

// defaultServer is the server the CLI talks to without --server or
// $SLUICE_SERVER: `sluice serve`'s default address.
const defaultServer = "http://127.0.0.1:8080"

// apiFlags are the flags every CLI command shares: where the server is,
// the key it is sent, and the output's form.
type apiFlags struct {
	server       string
	adminKey     string
	adminKeyFile string
	apiKeyFile   string
	json         bool
	timeout      time.Duration
}

// register adds f's flags to fs, their defaults from the environment.
func (f *apiFlags) register(fs *flag.FlagSet) {
	server := os.Getenv("SLUICE_SERVER")
	if server == "" {
		server = defaultServer
	}
	fs.StringVar(&f.server, "server", server, "the server's base `URL` (or $SLUICE_SERVER)")
	fs.StringVar(&f.adminKeyFile, "admin-key-file", "", "`file` holding the admin key (else $SLUICE_ADMIN_KEY, or $SLUICE_ADMIN_KEY_FILE)")
	fs.StringVar(&f.adminKey, "admin-key", "", "the admin `key`: it shows in ps, prefer $SLUICE_ADMIN_KEY or --admin-key-file")
	fs.StringVar(&f.apiKeyFile, "api-key-file", "", "`file` holding a tenant's API key, sent instead of the admin key (else $SLUICE_API_KEY)")
	fs.BoolVar(&f.json, "json", false, "print the server's answer as JSON, for scripts")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "the longest a call to the server may take")
}

// bearer returns the key to send: a tenant's API key if one is given, else
// the admin key, empty for a server without authentication. Flags win
// over the environment: --api-key-file, --admin-key-file or --admin-key
// (with a warning on stderr), then $SLUICE_API_KEY, $SLUICE_ADMIN_KEY,
// $SLUICE_ADMIN_KEY_FILE.
func (f *apiFlags) bearer(stderr io.Writer) (string, error) {
	switch {
	case f.apiKeyFile != "":
		return readKeyFile("--api-key-file", f.apiKeyFile)
	case f.adminKeyFile != "" && f.adminKey != "":
		return "", errors.New("give --admin-key-file or --admin-key, not both")
	case f.adminKeyFile != "":
		return readKeyFile("--admin-key-file", f.adminKeyFile)
	case f.adminKey != "":
		fmt.Fprintln(stderr, "sluice: warning: --admin-key shows in ps and shell history; use $SLUICE_ADMIN_KEY or --admin-key-file")
		return f.adminKey, nil
	}
	if k := os.Getenv("SLUICE_API_KEY"); k != "" {
		return k, nil
	}
	if k := os.Getenv("SLUICE_ADMIN_KEY"); k != "" {
		return k, nil
	}
	if file := os.Getenv("SLUICE_ADMIN_KEY_FILE"); file != "" {
		return readKeyFile("$SLUICE_ADMIN_KEY_FILE", file)
	}
	return "", nil
}

// readKeyFile reads a key from file, without the line's end.
func readKeyFile(flagName, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return "", fmt.Errorf("%s: %s is empty", flagName, file)
	}
	return k, nil
}

// api calls a server's routes.
type api struct {
	base  string
	key   string
	httpc *http.Client
}

// newAPI returns the api f names.
func (f *apiFlags) newAPI(stderr io.Writer) (*api, error) {
	key, err := f.bearer(stderr)
	if err != nil {
		return nil, err
	}
	base := strings.TrimRight(f.server, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("--server %q: want an http:// or https:// URL", f.server)
	}
	return &api{base: base, key: key, httpc: &http.Client{Timeout: f.timeout}}, nil
}

// do sends in (if not nil) as JSON to path with method, and returns the
// answer's body, decoded into out if out is not nil. An answer other than
// 2xx is an error that names what the server said (apiError).
func (a *api) do(ctx context.Context, method, path string, in, out any) ([]byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.key != "" {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
	resp, err := a.httpc.Do(req)
	if err != nil {
		return nil, a.unreachable(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, a.unreachable(err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, a.refused(resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("%s %s: the server's answer is not what this sluice reads (a server of another version?): %w", method, path, err)
		}
	}
	return b, nil
}

// unreachable is the error of a call that got no answer.
func (a *api) unreachable(err error) error {
	if ue, ok := err.(*url.Error); ok {
		err = ue.Err // it names the URL, which the message does
	}
	return fmt.Errorf("cannot reach the server at %s (--server or $SLUICE_SERVER): %w", a.base, err)
}

// refused is the error of the server's answer status with body: what it
// said, the field it named, and for a key it refused, which key was sent.
func (a *api) refused(status int, body []byte) error {
	e := wire.ParseError("", status, body)
	msg, field := e.(*sluice.Error).Message, sluice.FieldOf(e)
	if field != "" {
		msg = fmt.Sprintf("%s (field %s)", msg, field)
	}
	code := fmt.Sprintf("%d %s", status, http.StatusText(status))
	switch status {
	case http.StatusUnauthorized:
		if a.key == "" {
			return fmt.Errorf("the server at %s wants a key (%s): set $SLUICE_ADMIN_KEY or --admin-key-file, or $SLUICE_API_KEY for a tenant's", a.base, code)
		}
		return fmt.Errorf("the server at %s refused the key sent (%s): %s", a.base, code, msg)
	case http.StatusForbidden:
		return fmt.Errorf("the server at %s refused the key sent for this (%s): %s", a.base, code, msg)
	}
	return fmt.Errorf("the server at %s answered %s: %s", a.base, code, msg)
}

// parseCLI parses args with fs, flags and operands in any order
// (`sluice check chat --key user=u1`), and returns the operands. Past
// "--", the rest are operands.
func parseCLI(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) ([]string, error) {
	var operands []string
	for {
		if err := parseFlags(fs, args, stdout, stderr); err != nil {
			return nil, err
		}
		rest := fs.Args()
		switch {
		case len(rest) == 0:
			return operands, nil
		case len(rest) < len(args) && args[len(args)-len(rest)-1] == "--":
			return append(operands, rest...), nil
		}
		operands, args = append(operands, rest[0]), rest[1:]
	}
}

// keyParts is a repeated --key name=value flag: a request's key parts.
type keyParts map[string]string

func (k keyParts) String() string {
	return url.Values(k.values()).Encode()
}

func (k keyParts) values() url.Values {
	v := url.Values{}
	for name, s := range k {
		v.Set(name, s)
	}
	return v
}

func (k keyParts) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	switch {
	case !ok || name == "":
		return fmt.Errorf("want name=value (user=u-42), got %q", s)
	case k[name] != "":
		return fmt.Errorf("part %q given twice", name)
	}
	k[name] = value
	return nil
}

// helpAsked reports whether args ask for a command's help: "help" first,
// or -h, -help or --help anywhere before "--".
func helpAsked(args []string) bool {
	if len(args) > 0 && args[0] == "help" {
		return true
	}
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// printHelp prints a command's usage and fs's flags to stdout, and
// returns flag.ErrHelp (run's success).
func printHelp(fs *flag.FlagSet, usage string, stdout io.Writer) error {
	fmt.Fprint(stdout, usage)
	fs.SetOutput(stdout)
	fs.PrintDefaults()
	return flag.ErrHelp
}
