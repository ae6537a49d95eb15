package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// runApp runs the CLI with args and returns its stdout.
func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer = &out
	err := app.Run(context.Background(), append([]string{"scos-builder"}, args...))
	return out.String(), err
}

func TestHelpExplainsTool(t *testing.T) {
	out, err := runApp(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--cache-dir", "--progress", "--log-level", "Ignition", "content-addressed cache", "recipes"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestVersionJSON(t *testing.T) {
	out, err := runApp(t, "version", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if v.GoVersion == "" || len(v.Tools) != len(externalTools) {
		t.Fatalf("version = %+v", v)
	}
}

func TestRecipesJSON(t *testing.T) {
	out, err := runApp(t, "recipes", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var list []struct {
		Name   string   `json:"name"`
		OSTags []string `json:"os-tags"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[2].Name != "scos" || list[2].OSTags[0] != "stream-coreos" {
		t.Fatalf("recipes = %+v", list)
	}
}

func TestUsageErrors(t *testing.T) {
	_, err := runApp(t, "--progress", "fancy", "version")
	if err == nil || !strings.Contains(err.Error(), "valid: auto, tty, plain, json") {
		t.Fatalf("err = %v", err)
	}
	_, err = runApp(t, "--log-level", "loud", "version")
	if err == nil || !strings.Contains(err.Error(), "debug, info, warn, error") {
		t.Fatalf("err = %v", err)
	}
}
