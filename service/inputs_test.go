package service_test

import (
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

// posed makes a puppet's run in a new session of alice's pose q, and returns the turn and
// the question waiting.
func posed(t *testing.T, q service.QuestionSpec) (*service.Service, *turn, service.Pending) {
	t.Helper()
	p := newPuppet()
	svc := start(t, withPuppet(p))
	sess := newSession(t, svc, alice, "puppet", "")
	send(t, svc, alice, sess.ID, "ask me")
	tn := p.next(t)
	pending, err := tn.out.Pose(q)
	if err != nil {
		t.Fatalf("Pose: %v", err)
	}
	return svc, tn, pending
}

func TestMultipleChoiceAnswers(t *testing.T) {
	spec := service.QuestionSpec{Prompt: "Which colours?", Choices: []string{"red", "green", "blue"}, Multiple: true}

	t.Run("an answer that is not a JSON array of distinct choices is EINVALID and changes nothing", func(t *testing.T) {
		svc, _, pending := posed(t, spec)
		for _, bad := range []struct{ answer, want string }{
			{"red", "JSON array"},
			{`"red"`, "JSON array"},
			{`[]`, "JSON array"},
			{`[1]`, "JSON array"},
			{`["red", "pink"]`, `"pink" is not one of the choices`},
			{`["red", "red"]`, `"red" is picked twice`},
			{`["Red"]`, `"Red" is not one of the choices`},
		} {
			_, _, err := svc.Respond(alice, pending.ID(), bad.answer)
			wantCode(t, bad.answer, err, service.EINVALID)
			if err != nil && !strings.Contains(service.ErrorMessage(err), bad.want) {
				t.Errorf("answer %s: %q, want it to say %q", bad.answer, service.ErrorMessage(err), bad.want)
			}
		}
		q, err := svc.Question(alice, pending.ID())
		if err != nil || q.Answer != nil || q.Withdrawn {
			t.Fatalf("after refused answers the question is %+v, %v", q, err)
		}
	})

	t.Run("a JSON array of some of the choices, in any order, is the answer the agent gets", func(t *testing.T) {
		svc, tn, pending := posed(t, spec)
		if _, _, err := svc.Respond(alice, pending.ID(), `["blue", "red"]`); err != nil {
			t.Fatal(err)
		}
		got, err := pending.Wait(tn.ctx)
		if err != nil || got != `["blue", "red"]` {
			t.Errorf("the agent got %q, %v", got, err)
		}
	})

	t.Run("a single-choice question takes free text: its choices are suggestions", func(t *testing.T) {
		svc, tn, pending := posed(t, service.QuestionSpec{Prompt: "Which colour?", Choices: []string{"red", "green"}})
		if _, _, err := svc.Respond(alice, pending.ID(), "a kind of teal"); err != nil {
			t.Fatal(err)
		}
		if got, err := pending.Wait(tn.ctx); err != nil || got != "a kind of teal" {
			t.Errorf("the agent got %q, %v", got, err)
		}
	})
}

func TestFormAnswers(t *testing.T) {
	form := `{"type":"object","properties":{"name":{"type":"string","minLength":1},"age":{"type":"integer","minimum":0}},"required":["name"],"additionalProperties":false}`

	t.Run("an answer that is not JSON fitting the schema is EINVALID naming where, and changes nothing", func(t *testing.T) {
		svc, _, pending := posed(t, service.QuestionSpec{Prompt: "Who are you?", AnswerSchema: form})
		for _, bad := range []struct{ answer, want string }{
			{"Ada", "does not fit"},
			{`{"age": 3}`, "name"},
			{`{"name": "Ada", "age": -1}`, "/age"},
			{`{"name": "Ada", "age": "three"}`, "/age"},
			{`{"name": "Ada", "shoe": 42}`, "shoe"},
		} {
			_, _, err := svc.Respond(alice, pending.ID(), bad.answer)
			wantCode(t, bad.answer, err, service.EINVALID)
			if err != nil && !strings.Contains(service.ErrorMessage(err), bad.want) {
				t.Errorf("answer %s: %q, want it to name %q", bad.answer, service.ErrorMessage(err), bad.want)
			}
		}
		if q, _ := svc.Question(alice, pending.ID()); q == nil || q.Answer != nil {
			t.Fatalf("after refused answers the question is %+v", q)
		}
	})

	t.Run("a fitting answer reaches the agent as sent", func(t *testing.T) {
		svc, tn, pending := posed(t, service.QuestionSpec{Prompt: "Who are you?", AnswerSchema: form})
		answer := `{"name": "Ada", "age": 36}`
		if _, _, err := svc.Respond(alice, pending.ID(), answer); err != nil {
			t.Fatal(err)
		}
		if got, err := pending.Wait(tn.ctx); err != nil || got != answer {
			t.Errorf("the agent got %q, %v", got, err)
		}
	})
}

func TestPoseRefusesMalformedQuestions(t *testing.T) {
	p := newPuppet()
	svc := start(t, withPuppet(p))
	sess := newSession(t, svc, alice, "puppet", "")
	send(t, svc, alice, sess.ID, "ask me")
	tn := p.next(t)
	many := make([]string, 101)
	for i := range many {
		many[i] = "x"
	}
	for _, bad := range []struct {
		what string
		spec service.QuestionSpec
	}{
		{"an empty prompt", service.QuestionSpec{Prompt: " \u200b "}},
		{"several answers without choices", service.QuestionSpec{Prompt: "Which?", Multiple: true}},
		{"too many choices", service.QuestionSpec{Prompt: "Which?", Choices: many}},
		{"a schema that is not JSON", service.QuestionSpec{Prompt: "Form", AnswerSchema: `{"type":`}},
		{"a schema that is not a schema", service.QuestionSpec{Prompt: "Form", AnswerSchema: `{"type":"thing"}`}},
		{"a schema with an outside reference", service.QuestionSpec{Prompt: "Form", AnswerSchema: `{"$ref":"https://example.com/s.json"}`}},
	} {
		_, err := tn.out.Pose(bad.spec)
		wantCode(t, bad.what, err, service.EINVALID)
	}
	if v := view(t, svc, alice, sess.ID); v.Status != service.SessionRunning || len(v.PendingQuestions) != 0 {
		t.Errorf("after refused questions the session is %s with %d questions", v.Status, len(v.PendingQuestions))
	}
}
