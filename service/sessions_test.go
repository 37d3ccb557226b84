package service_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

func TestCreateTalkSession(t *testing.T) {
	t.Run("creates a session for the caller", func(t *testing.T) {
		svc := start(t, setup{})
		v, err := svc.CreateTalkSession(alice, "  Trip plans ", service.SettingsInput{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := v.Title, "Trip plans"; got != want {
			t.Errorf("title %q, want %q (trimmed)", got, want)
		}
		if got, want := v.UserID, "alice"; got != want {
			t.Errorf("user %q, want %q", got, want)
		}
		if got, want := v.Settings.Agent, "demo"; got != want {
			t.Errorf("agent %q, want the default %q", got, want)
		}
		if got, want := v.Settings.BusyPolicy, service.BusyInterrupt; got != want {
			t.Errorf("busy policy %q, want the default %q", got, want)
		}
		if got, want := v.Status, service.SessionIdle; got != want {
			t.Errorf("status %q, want %q", got, want)
		}
		if v.ActiveRun != nil || v.PendingQuestion != nil {
			t.Errorf("a new session has an active run %v or a question %v", v.ActiveRun, v.PendingQuestion)
		}
		if got, want := v.StreamCursor, service.EncodeCursor(v.ID, service.Cursor{}); got != want {
			t.Errorf("stream cursor %q, want the start of the log %q", got, want)
		}
		if got := view(t, svc, alice, v.ID); got.Title != "Trip plans" || got.UserID != "alice" {
			t.Errorf("View after create: %+v", got.TalkSession)
		}
		list, _, err := svc.Sessions(alice, nil, "")
		if err != nil || len(list) != 1 || list[0].ID != v.ID {
			t.Errorf("Sessions after create: %v %v", list, err)
		}
	})

	t.Run("the session is the caller's: another user cannot see it", func(t *testing.T) {
		svc := start(t, setup{})
		v := newSession(t, svc, alice, "", "")
		_, err := svc.View(bob, v.ID)
		wantCode(t, "bob's View", err, service.ENOTFOUND)
		list, _, err := svc.Sessions(bob, nil, "")
		if err != nil || len(list) != 0 {
			t.Errorf("bob's Sessions: %v %v", list, err)
		}
	})

	t.Run("EINVALID for a title that is too long", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.MaxTitleLength = 5 }})
		_, err := svc.CreateTalkSession(alice, "abcdef", service.SettingsInput{})
		wantCode(t, "6 characters", err, service.EINVALID)
		// The length is counted in characters, not bytes.
		if _, err := svc.CreateTalkSession(alice, "héllö", service.SettingsInput{}); err != nil {
			t.Errorf("5 characters in 7 bytes: %v", err)
		}
		_, err = svc.CreateTalkSession(alice, "a\xffb", service.SettingsInput{})
		wantCode(t, "a title that is not UTF-8", err, service.EINVALID)
		if list, _, _ := svc.Sessions(alice, nil, ""); len(list) != 1 {
			t.Errorf("%d sessions, want only the valid one", len(list))
		}
	})

	t.Run("EINVALID for an unknown agent", func(t *testing.T) {
		svc := start(t, setup{})
		_, err := svc.CreateTalkSession(alice, "", service.SettingsInput{Agent: ptr("nope")})
		wantCode(t, "agent nope", err, service.EINVALID)
		if list, _, _ := svc.Sessions(alice, nil, ""); len(list) != 0 {
			t.Errorf("a refused session was stored: %v", list)
		}
	})

	t.Run("EINVALID for an invalid setting", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.MaxMessageBytes = 64 }})
		for name, in := range invalidSettings(64) {
			_, err := svc.CreateTalkSession(alice, "", in)
			wantCode(t, name, err, service.EINVALID)
		}
		if list, _, _ := svc.Sessions(alice, nil, ""); len(list) != 0 {
			t.Errorf("refused sessions were stored: %d", len(list))
		}
	})

	t.Run("valid settings are kept", func(t *testing.T) {
		svc := start(t, setup{agents: map[string]service.Runner{"other": newPuppet()}})
		policy := service.BusyReject
		v, err := svc.CreateTalkSession(alice, "", service.SettingsInput{
			Agent: ptr("other"), Model: ptr("m1"), SystemPrompt: ptr("be brief"), Temperature: ptr(2.0), BusyPolicy: &policy})
		if err != nil {
			t.Fatal(err)
		}
		got := view(t, svc, alice, v.ID).Settings
		if got.Agent != "other" || *got.Model != "m1" || *got.SystemPrompt != "be brief" || *got.Temperature != 2 || got.BusyPolicy != service.BusyReject {
			t.Errorf("settings %+v", got)
		}
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		_, err := svc.CreateTalkSession(nobody, "", service.SettingsInput{})
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})

	t.Run("EUNAVAILABLE after Close", func(t *testing.T) {
		svc := start(t, setup{})
		svc.Close()
		_, err := svc.CreateTalkSession(alice, "", service.SettingsInput{})
		wantCode(t, "after Close", err, service.EUNAVAILABLE)
	})
}

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

func TestView(t *testing.T) {
	t.Run("returns the caller's session with its status, active run, pending question and stream cursor, read together", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)

		v := view(t, svc, alice, sess.ID)
		if v.Status != service.SessionIdle || v.ActiveRun != nil || v.PendingQuestion != nil {
			t.Errorf("idle session: status %s, run %v, question %v", v.Status, v.ActiveRun, v.PendingQuestion)
		}

		_, run := send(t, svc, alice, sess.ID, "hi")
		tn := p.next(t)
		f.until(runIs(run.ID, service.RunRunning))
		v = view(t, svc, alice, sess.ID)
		if v.Status != service.SessionRunning || v.ActiveRun == nil || v.ActiveRun.ID != run.ID || v.ActiveRun.Status != service.RunRunning {
			t.Errorf("running session: status %s, run %+v", v.Status, v.ActiveRun)
		}
		if got, want := v.StreamCursor, f.cursor(sess.ID); got != want {
			t.Errorf("stream cursor %q, want the position after the last event %q", got, want)
		}

		asked := tn.ask("Which one?", []string{"a", "b"})
		evs := f.until(runIs(run.ID, service.RunWaitingForInput))
		q := first(t, evs, service.EventQuestionAsked, nil).Question
		v = view(t, svc, alice, sess.ID)
		if v.Status != service.SessionWaitingForInput || v.ActiveRun == nil || v.ActiveRun.Status != service.RunWaitingForInput {
			t.Errorf("waiting session: status %s, run %+v", v.Status, v.ActiveRun)
		}
		if v.PendingQuestion == nil || v.PendingQuestion.ID != q.ID || v.PendingQuestion.Prompt != "Which one?" {
			t.Errorf("pending question %+v, want %s", v.PendingQuestion, q.ID)
		}
		if got, want := v.StreamCursor, f.cursor(sess.ID); got != want {
			t.Errorf("stream cursor %q, want the position after the last event %q", got, want)
		}
		if got, want := v.LastSeq, f.last.Seq; got != want {
			t.Errorf("LastSeq %d, want %d", got, want)
		}
		if _, _, err := svc.Respond(alice, q.ID, "a"); err != nil {
			t.Fatal(err)
		}
		asked.wait(t)
		tn.finish(nil)
		f.until(runEnds(run.ID))
		v = view(t, svc, alice, sess.ID)
		if v.Status != service.SessionIdle || v.ActiveRun != nil || v.PendingQuestion != nil {
			t.Errorf("after the run: status %s, run %v, question %v", v.Status, v.ActiveRun, v.PendingQuestion)
		}
	})

	t.Run("ENOTFOUND when missing", func(t *testing.T) {
		svc := start(t, setup{})
		_, err := svc.View(alice, missingID)
		wantCode(t, "missing", err, service.ENOTFOUND)
	})

	t.Run("ENOTFOUND when another user's, as when missing", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, other := svc.View(bob, sess.ID)
		_, missing := svc.View(bob, missingID)
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
	})

	t.Run("EINVALID for a malformed ID", func(t *testing.T) {
		svc := start(t, setup{})
		for _, id := range []string{"", "42", "not-a-uuid-not-a-uuid-not-a-uuid-xxx", missingID + "0"} {
			_, err := svc.View(alice, id)
			wantCode(t, "id "+id, err, service.EINVALID)
		}
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, err := svc.View(nobody, sess.ID)
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})
}

func TestSessions(t *testing.T) {
	// Three sessions of alice's, created in this order, and one of bob's.
	three := func(t *testing.T, svc *service.Service) (s1, s2, s3 string) {
		t.Helper()
		s1 = newSession(t, svc, alice, "", "").ID
		s2 = newSession(t, svc, alice, "", "").ID
		newSession(t, svc, bob, "", "")
		s3 = newSession(t, svc, alice, "", "").ID
		return
	}
	ids := func(page []*service.SessionView) []string {
		var out []string
		for _, v := range page {
			out = append(out, v.ID)
		}
		return out
	}

	t.Run("returns a page of the caller's sessions, most recent activity first", func(t *testing.T) {
		svc := start(t, setup{})
		s1, s2, s3 := three(t, svc)
		page, hasNext, err := svc.Sessions(alice, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(page), []string{s3, s2, s1}; !equalStrings(got, want) {
			t.Errorf("sessions %v, want %v", got, want)
		}
		if hasNext {
			t.Error("hasNext on the only page")
		}
		// A message is activity: its session comes first.
		f := follow(t, svc, alice, s1, "")
		_, run := send(t, svc, alice, s1, "hello")
		f.until(runEnds(run.ID))
		page, _, _ = svc.Sessions(alice, nil, "")
		if got, want := ids(page), []string{s1, s3, s2}; !equalStrings(got, want) {
			t.Errorf("after a message in the oldest: %v, want %v", got, want)
		}
	})

	t.Run("a rename and a settings change are activity", func(t *testing.T) {
		svc := start(t, setup{})
		s1, s2, s3 := three(t, svc)
		if _, err := svc.RenameTalkSession(alice, s2, "renamed"); err != nil {
			t.Fatal(err)
		}
		page, _, _ := svc.Sessions(alice, nil, "")
		if got, want := ids(page), []string{s2, s3, s1}; !equalStrings(got, want) {
			t.Errorf("after renaming the middle one: %v, want %v", got, want)
		}
		if _, err := svc.UpdateSettings(alice, s1, service.SettingsInput{Model: ptr("m")}); err != nil {
			t.Fatal(err)
		}
		page, _, _ = svc.Sessions(alice, nil, "")
		if got, want := ids(page), []string{s1, s2, s3}; !equalStrings(got, want) {
			t.Errorf("after changing the oldest one's settings: %v, want %v", got, want)
		}
	})

	t.Run("after the session-list cursor after", func(t *testing.T) {
		svc := start(t, setup{})
		s1, s2, s3 := three(t, svc)
		page, hasNext, err := svc.Sessions(alice, ptr(2), "")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(page), []string{s3, s2}; !equalStrings(got, want) || !hasNext {
			t.Fatalf("first page %v (hasNext %v), want %v and more", got, hasNext, want)
		}
		page, hasNext, err = svc.Sessions(alice, ptr(2), service.EncodeSessionCursor(page[1].TalkSession))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(page), []string{s1}; !equalStrings(got, want) || hasNext {
			t.Errorf("second page %v (hasNext %v), want %v and no more", got, hasNext, want)
		}
	})

	t.Run("first is clamped to the page size limit", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.MaxPageSize = 2 }})
		three(t, svc)
		page, hasNext, err := svc.Sessions(alice, ptr(100), "")
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 2 || !hasNext {
			t.Errorf("%d sessions (hasNext %v), want the limit of 2 and more", len(page), hasNext)
		}
	})

	t.Run("without first, a page has the default size", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.DefaultPageSize = 2 }})
		three(t, svc)
		page, hasNext, err := svc.Sessions(alice, nil, "")
		if err != nil || len(page) != 2 || !hasNext {
			t.Errorf("%d sessions (hasNext %v, %v), want the default 2 and more", len(page), hasNext, err)
		}
	})

	t.Run("EINVALID for a bad cursor", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		for _, bad := range []string{"!!", "bm90IGEgY3Vyc29y", service.EncodeCursor(sess.ID, service.Cursor{Seq: 1}), service.EncodeMessageCursor(&service.Message{Seq: 1})} {
			_, _, err := svc.Sessions(alice, nil, bad)
			wantCode(t, "cursor "+bad, err, service.EINVALID)
		}
	})

	t.Run("EINVALID for a negative first", func(t *testing.T) {
		svc := start(t, setup{})
		_, _, err := svc.Sessions(alice, ptr(-1), "")
		wantCode(t, "first -1", err, service.EINVALID)
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		_, _, err := svc.Sessions(nobody, nil, "")
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})
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

func TestDeleteTalkSession(t *testing.T) {
	t.Run("deletes a session and its history", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, "")
		_, run := send(t, svc, alice, sess.ID, "/ask Which colour?")
		evs := f.until(runIs(run.ID, service.RunWaitingForInput))
		q := first(t, evs, service.EventQuestionAsked, nil).Question
		if err := svc.DeleteTalkSession(alice, sess.ID); err != nil {
			t.Fatal(err)
		}
		_, err := svc.View(alice, sess.ID)
		wantCode(t, "View", err, service.ENOTFOUND)
		_, _, _, err = svc.History(alice, sess.ID, nil, nil, "", nil, "")
		wantCode(t, "History", err, service.ENOTFOUND)
		_, err = svc.Run(alice, run.ID)
		wantCode(t, "Run", err, service.ENOTFOUND)
		_, err = svc.Question(alice, q.ID)
		wantCode(t, "Question", err, service.ENOTFOUND)
		_, _, err = svc.Respond(alice, q.ID, "red")
		wantCode(t, "Respond", err, service.ENOTFOUND)
		if list, _, _ := svc.Sessions(alice, nil, ""); len(list) != 0 {
			t.Errorf("Sessions still lists %d", len(list))
		}
		_, _, err = svc.AddMessage(alice, sess.ID, "hello?", "")
		wantCode(t, "AddMessage", err, service.ENOTFOUND)
		wantCode(t, "DeleteTalkSession again", svc.DeleteTalkSession(alice, sess.ID), service.ENOTFOUND)
	})

	t.Run("stopping its run", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		send(t, svc, alice, sess.ID, "hi")
		tn := p.next(t)
		tn.say(t, "partial")
		if err := svc.DeleteTalkSession(alice, sess.ID); err != nil {
			t.Fatal(err)
		}
		tn.stopped(t)
		if err := tn.out.Text("more"); err == nil {
			t.Error("the deleted session's agent could still write")
		}
		if st := svc.Stats(); st.RunsFinished[service.RunCompleted] != 0 {
			t.Errorf("the stopped run counted as completed: %v", st.RunsFinished)
		}
	})

	t.Run("subscriptions to it end", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, "")
		if err := svc.DeleteTalkSession(alice, sess.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := f.rest(); err != service.ErrSessionDeleted {
			t.Errorf("the subscription ended with %v, want ErrSessionDeleted", err)
		}
		_, err := svc.Subscribe(alice, sess.ID, "", func() {})
		wantCode(t, "Subscribe afterwards", err, service.ENOTFOUND)
	})

	t.Run("ENOTFOUND when missing or another user's", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		other := svc.DeleteTalkSession(bob, sess.ID)
		missing := svc.DeleteTalkSession(bob, missingID)
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
		view(t, svc, alice, sess.ID) // still there
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		wantCode(t, "no user", svc.DeleteTalkSession(nobody, sess.ID), service.EUNAUTHORIZED)
	})
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLiveSessions(t *testing.T) {
	t.Run("commands on a session held in memory do not read it from the store, and see it as stored", func(t *testing.T) {
		store := &countingStore{Store: inmem.New()}
		svc, _ := startService(t, setup{store: store})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor) // holds the session's state
		_, run := send(t, svc, alice, sess.ID, "/slow 2")
		f.until(runEnds(run.ID))

		store.take()
		renamed, err := svc.RenameTalkSession(alice, sess.ID, "Renamed")
		if err != nil {
			t.Fatal(err)
		}
		_, run = send(t, svc, alice, sess.ID, "again")
		if n := store.take()["Session"]; n != 0 {
			t.Errorf("a rename and a message read the session from the store %d times", n)
		}
		f.until(runEnds(run.ID))

		// Nothing changes: the answer shows the session as the store has it, its
		// updatedAt moved by the last message.
		same, err := svc.RenameTalkSession(alice, sess.ID, "Renamed")
		if err != nil {
			t.Fatal(err)
		}
		stored, err := store.Store.Session(alice, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !same.UpdatedAt.Equal(stored.UpdatedAt) || !same.UpdatedAt.After(renamed.UpdatedAt) || same.Title != stored.Title {
			t.Errorf("no-op rename answered %q updated %v; stored %q updated %v (renamed at %v)",
				same.Title, same.UpdatedAt, stored.Title, stored.UpdatedAt, renamed.UpdatedAt)
		}
	})

	t.Run("another user's session held in memory costs the store reads a missing one does", func(t *testing.T) {
		store := &countingStore{Store: inmem.New()}
		svc, _ := startService(t, setup{store: store})
		sess := newSession(t, svc, alice, "", "")
		follow(t, svc, alice, sess.ID, sess.StreamCursor)
		store.take()
		_, _, theirs := svc.AddMessage(bob, sess.ID, "hi", "")
		theirReads := store.take()
		_, _, missing := svc.AddMessage(bob, missingID, "hi", "")
		missingReads := store.take()
		wantCode(t, "another user's", theirs, service.ENOTFOUND)
		wantSameError(t, theirs, missing)
		if fmt.Sprint(theirReads) != fmt.Sprint(missingReads) {
			t.Errorf("reads for another user's session %v, for a missing one %v", theirReads, missingReads)
		}
	})
}
