package app_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/httpapi"
)

func load(t *testing.T, env map[string]string) (app.Config, error) {
	t.Helper()
	return app.LoadConfig(nil, func(k string) string { return env[k] })
}

func TestLimitSettingsRefuseBadValuesNamingTheValidOnes(t *testing.T) {
	for env, c := range map[string]struct{ value, valid string }{
		"INTROSPECTION":      {"maybe", "on, signed-in or off"},
		"TRUSTED_PROXIES":    {"10.0.0.0/8,nonsense", "CIDRs like 10.0.0.0/8"},
		"ANON_RATE_LIMIT":    {"0", "a number > 0"},
		"GUEST_SIGNIN_RATE":  {"-1", "a number > 0"},
		"SUBSCRIBE_RATE":     {"fast", "a number > 0"},
		"MAX_ALIASES":        {"0", "a whole number ≥ 1"},
		"MAX_QUERY_BYTES":    {"lots", "a whole number ≥ 1"},
		"MAX_QUERY_TOKENS":   {"-5", "a whole number ≥ 1"},
		"GUEST_SIGNIN_BURST": {"0", "a whole number ≥ 1"},

		"MAX_SOCKETS_PER_ADDRESS":    {"0", "a whole number ≥ 1"},
		"MAX_SUBSCRIPTIONS_PER_USER": {"many", "a whole number ≥ 1"},
		"MAX_BODY_READS_PER_ADDRESS": {"-1", "a whole number ≥ 1"},
		"BODY_READ_TIMEOUT":          {"10ms", "a duration ≥ 100ms"},
	} {
		_, err := load(t, map[string]string{env: c.value})
		if err == nil || !strings.Contains(err.Error(), env) || !strings.Contains(err.Error(), c.valid) {
			t.Errorf("%s=%s: %v, want an error naming %s and %q", env, c.value, err, env, c.valid)
		}
	}
}

func TestLimitSettings(t *testing.T) {
	c, err := load(t, map[string]string{"INTROSPECTION": "signed-in", "TRUSTED_PROXIES": "10.0.0.0/8, 2001:db8::/32", "GUEST_SIGNIN_RATE": "0.5"})
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Introspection != httpapi.IntrospectionSignedIn || c.HTTP.GuestPerMinute != 0.5 || c.HTTP.MaxAliases != 30 ||
		len(c.HTTP.TrustedProxies) != 2 || c.HTTP.TrustedProxies[1] != netip.MustParsePrefix("2001:db8::/32") {
		t.Errorf("%+v", c.HTTP)
	}
	for value, want := range map[string]string{"true": httpapi.IntrospectionOn, "false": httpapi.IntrospectionOff, "off": httpapi.IntrospectionOff, "": httpapi.IntrospectionOn} {
		c, err := load(t, map[string]string{"INTROSPECTION": value})
		if err != nil || c.HTTP.Introspection != want {
			t.Errorf("INTROSPECTION=%q: %q %v, want %q", value, c.HTTP.Introspection, err, want)
		}
	}
}
