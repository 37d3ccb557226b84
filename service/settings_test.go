package service_test

import (
	"math"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

// invalidSettings are settings every command that takes settings refuses, by what is
// wrong with them, for a server whose MaxMessageBytes is max.
func invalidSettings(max int) map[string]service.SettingsInput {
	policy := service.BusyPolicy("SOMETIMES")
	return map[string]service.SettingsInput{
		"an unknown agent":                {Agent: ptr("nope")},
		"a negative temperature":          {Temperature: ptr(-0.1)},
		"a temperature above 2":           {Temperature: ptr(2.01)},
		"a temperature that is NaN":       {Temperature: ptr(math.NaN())},
		"an unknown busy policy":          {BusyPolicy: &policy},
		"a model name of 201 bytes":       {Model: ptr(strings.Repeat("m", 201))},
		"a model name that is not UTF-8":  {Model: ptr("gpt\xff")},
		"a system prompt that is too big": {SystemPrompt: ptr(strings.Repeat("p", max+1))},
		"a system prompt not UTF-8":       {SystemPrompt: ptr("be\xff")},
	}
}

func TestRenameTalkSession(t *testing.T) {
	t.Run("sets a session's title", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, "")
		v, err := svc.RenameTalkSession(alice, sess.ID, " New name  ")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := v.Title, "New name"; got != want {
			t.Errorf("returned title %q, want %q", got, want)
		}
		if got, want := view(t, svc, alice, sess.ID).Title, "New name"; got != want {
			t.Errorf("viewed title %q, want %q", got, want)
		}
		ev := f.until(is(service.EventSessionUpdated))[0]
		if got, want := ev.Session.Title, "New name"; got != want {
			t.Errorf("SessionUpdated title %q, want %q", got, want)
		}
		if got, want := v.StreamCursor, service.EncodeCursor(sess.ID, service.CursorOf(ev)); got != want {
			t.Errorf("returned stream cursor %q, want the one after the SessionUpdated %q", got, want)
		}
	})

	t.Run("ENOTFOUND when missing or another user's, as for create", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, other := svc.RenameTalkSession(bob, sess.ID, "mine now")
		_, missing := svc.RenameTalkSession(bob, missingID, "mine now")
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
		if got := view(t, svc, alice, sess.ID).Title; got != "" {
			t.Errorf("title %q after another user's rename", got)
		}
	})

	t.Run("EINVALID for a title that is too long, as for create", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.MaxTitleLength = 5 }})
		sess := newSession(t, svc, alice, "", "")
		_, err := svc.RenameTalkSession(alice, sess.ID, "abcdef")
		wantCode(t, "6 characters", err, service.EINVALID)
		_, err = svc.RenameTalkSession(alice, sess.ID, "\xff")
		wantCode(t, "not UTF-8", err, service.EINVALID)
		if got := view(t, svc, alice, sess.ID); got.Title != "" || got.LastSeq != 0 {
			t.Errorf("a refused rename changed the session: %q, LastSeq %d", got.Title, got.LastSeq)
		}
	})

	t.Run("EUNAVAILABLE after Close", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		svc.Close()
		_, err := svc.RenameTalkSession(alice, sess.ID, "x")
		wantCode(t, "after Close", err, service.EUNAVAILABLE)
	})

	t.Run("EUNAVAILABLE when it cannot be written, and the title stays", func(t *testing.T) {
		store := newFlakyStore()
		svc, _ := startService(t, setup{store: store})
		sess := newSession(t, svc, alice, "", "")
		store.writesFail.Store(true)
		_, err := svc.RenameTalkSession(alice, sess.ID, "x")
		wantCode(t, "storage failing", err, service.EUNAVAILABLE)
		store.writesFail.Store(false)
		if got := view(t, svc, alice, sess.ID); got.Title != "" || got.LastSeq != 0 {
			t.Errorf("a failed rename changed the session: %q, LastSeq %d", got.Title, got.LastSeq)
		}
	})
}

func TestUpdateSettings(t *testing.T) {
	t.Run("an update that changes nothing writes nothing and keeps updatedAt", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		v1, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{Model: ptr("m2")})
		if err != nil {
			t.Fatal(err)
		}
		v2, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{Model: ptr("m2")})
		if err != nil {
			t.Fatal(err)
		}
		v3, err := svc.RenameTalkSession(alice, sess.ID, v1.Title)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []*service.SessionView{v2, v3, view(t, svc, alice, sess.ID)} {
			if v.LastSeq != v1.LastSeq || !v.UpdatedAt.Equal(v1.UpdatedAt) {
				t.Errorf("after updates that change nothing: LastSeq %d, updatedAt %v; want %d, %v", v.LastSeq, v.UpdatedAt, v1.LastSeq, v1.UpdatedAt)
			}
		}
	})

	t.Run("changes a session's settings", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		policy := service.BusyEnqueue
		v, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{Model: ptr("m2"), SystemPrompt: ptr("be brief"), Temperature: ptr(0.5), BusyPolicy: &policy})
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range []service.Settings{v.Settings, view(t, svc, alice, sess.ID).Settings} {
			if got.Agent != "demo" || got.Model == nil || *got.Model != "m2" || got.SystemPrompt == nil || *got.SystemPrompt != "be brief" ||
				got.Temperature == nil || *got.Temperature != 0.5 || got.BusyPolicy != service.BusyEnqueue {
				t.Errorf("settings %+v", got)
			}
		}
	})

	t.Run("they apply to runs that start afterwards", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, "")
		_, run1 := send(t, svc, alice, sess.ID, "first")
		tn := p.next(t)
		if _, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{Model: ptr("m2")}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{Agent: ptr("demo")}); err != nil {
			t.Fatal(err)
		}
		// The running agent goes on as it started.
		tn.running(t)
		tn.say(t, "still the puppet")
		tn.finish(nil)
		evs := f.until(runEnds(run1.ID))
		if got := replyOf(t, evs, run1.ID).Content; got != "still the puppet" {
			t.Errorf("first reply %q", got)
		}
		if tn.req.Settings.Model != nil {
			t.Errorf("the first run got model %q", *tn.req.Settings.Model)
		}
		// The next run uses the new agent.
		_, run2 := send(t, svc, alice, sess.ID, "second")
		evs = f.until(runEnds(run2.ID))
		if got, want := replyOf(t, evs, run2.ID).Content, "You said: second"; got != want {
			t.Errorf("second reply %q, want the demo's %q", got, want)
		}
		if got := getRun(t, svc, alice, run2.ID).Agent; got != "demo" {
			t.Errorf("second run's agent %q, want demo", got)
		}
	})

	t.Run("the new model and system prompt reach the next run's agent", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		send(t, svc, alice, sess.ID, "first")
		tn := p.next(t)
		if _, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{Model: ptr("m2"), SystemPrompt: ptr("sys")}); err != nil {
			t.Fatal(err)
		}
		if tn.req.Settings.Model != nil || tn.req.Settings.SystemPrompt != nil {
			t.Errorf("the running agent's settings changed: %+v", tn.req.Settings)
		}
		tn.finish(nil)
		send(t, svc, alice, sess.ID, "second")
		got := p.next(t).req.Settings
		if got.Model == nil || *got.Model != "m2" || got.SystemPrompt == nil || *got.SystemPrompt != "sys" {
			t.Errorf("the next run's settings %+v, want model m2 and system prompt sys", got)
		}
	})

	t.Run("nil fields stay as they are", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		if _, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{Model: ptr("m1"), Temperature: ptr(1.5), SystemPrompt: ptr("sys")}); err != nil {
			t.Fatal(err)
		}
		policy := service.BusyReject
		v, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{BusyPolicy: &policy})
		if err != nil {
			t.Fatal(err)
		}
		got := v.Settings
		if got.Model == nil || *got.Model != "m1" || got.Temperature == nil || *got.Temperature != 1.5 ||
			got.SystemPrompt == nil || *got.SystemPrompt != "sys" || got.Agent != "demo" || got.BusyPolicy != service.BusyReject {
			t.Errorf("settings %+v", got)
		}
	})

	t.Run("an empty Model or SystemPrompt clears it", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		if _, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{Model: ptr("m1"), SystemPrompt: ptr("sys")}); err != nil {
			t.Fatal(err)
		}
		v, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{Model: ptr(""), SystemPrompt: ptr("")})
		if err != nil {
			t.Fatal(err)
		}
		if v.Settings.Model != nil || v.Settings.SystemPrompt != nil {
			t.Errorf("model %v, system prompt %v, want both cleared", v.Settings.Model, v.Settings.SystemPrompt)
		}
		if got := view(t, svc, alice, sess.ID).Settings; got.Model != nil || got.SystemPrompt != nil {
			t.Errorf("stored model %v, system prompt %v, want both cleared", got.Model, got.SystemPrompt)
		}
	})

	t.Run("EINVALID for an unknown agent or an invalid setting, and nothing changes", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.MaxMessageBytes = 64 }})
		sess := newSession(t, svc, alice, "", "")
		for name, in := range invalidSettings(64) {
			_, err := svc.UpdateSettings(alice, sess.ID, in)
			wantCode(t, name, err, service.EINVALID)
		}
		v := view(t, svc, alice, sess.ID)
		if v.LastSeq != 0 || v.Settings.Agent != "demo" || v.Settings.Model != nil || v.Settings.Temperature != nil || v.Settings.BusyPolicy != service.BusyInterrupt {
			t.Errorf("refused changes were stored: LastSeq %d, %+v", v.LastSeq, v.Settings)
		}
	})

	t.Run("ENOTFOUND when missing or another user's", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, other := svc.UpdateSettings(bob, sess.ID, service.SettingsInput{Model: ptr("m")})
		_, missing := svc.UpdateSettings(bob, missingID, service.SettingsInput{Model: ptr("m")})
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
		if got := view(t, svc, alice, sess.ID).Settings.Model; got != nil {
			t.Errorf("another user changed the model to %q", *got)
		}
	})
}
