package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// envPrefix begins the environment variable of each flag of `sluice
// serve`: SLUICE_ and the flag's name upper-cased, its dashes as
// underscores (--dynamodb-table: $SLUICE_DYNAMODB_TABLE).
const envPrefix = "SLUICE_"

// notFlags are the SLUICE_ variables read by something other than `sluice
// serve`'s flags, which it leaves alone: the tests' (README.md,
// docs/dashboard.md), the operator's CLI's (cli.go), which a shell may
// export for both, and the secret of --pseudonymise-keys (a value, read
// where --key-secret-file is).
var notFlags = []string{"SLUICE_BINARY", "SLUICE_DYNOXIDE", "SLUICE_SCREENSHOTS", "SLUICE_SERVER", "SLUICE_TENANT", "SLUICE_API_KEY", "SLUICE_KEY_SECRET"}

// envName returns the environment variable of the flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// envUsage appends each flag's variable to its help.
func envUsage(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage += " ($" + envName(f.Name) + ")"
	})
}

// applyEnv sets each flag of fs not given on the command line from its
// variable in environ (KEY=VALUE pairs, as os.Environ returns them), if
// set and not empty: a flag given wins over its variable, and an empty
// variable is as if unset, as templates of platforms render a value left
// out. A value the flag refuses is an
// error naming the variable and the flag. It returns a warning for each
// SLUICE_ variable that names no flag, with the flag nearest its name.
func applyEnv(fs *flag.FlagSet, environ []string) (warnings []string, err error) {
	env := make(map[string]string)
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, envPrefix) && v != "" {
			env[k] = v
		}
	}
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		names = append(names, f.Name)
		k := envName(f.Name)
		v, ok := env[k]
		delete(env, k)
		if !ok || given[f.Name] || err != nil {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("$%s (--%s): invalid value %q: %w", k, f.Name, v, e)
		}
	})
	if err != nil {
		return nil, err
	}
	for k := range env {
		if slices.Contains(notFlags, k) {
			continue
		}
		w := fmt.Sprintf("$%s names no flag of %s", k, fs.Name())
		name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, envPrefix), "_", "-"))
		if near, ok := nearest(name, names); ok {
			w += fmt.Sprintf("; did you mean $%s (--%s)?", envName(near), near)
		}
		warnings = append(warnings, w)
	}
	slices.Sort(warnings)
	return warnings, nil
}
