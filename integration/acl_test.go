package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/atleastonce"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/processor"
)

// workerACLs are the ACLs `processor run` needs, as docs/security.md's "ACLs" table
// lists them: the secured tests run the worker as a user that has these and
// nothing else. group- names the topics the worker makes (<group>-table,
// -loop, -dlq) and, exactly-once, its transactional IDs
// (<group>-<instance id>-<thread>).
func workerACLs(group, input, output string, eos bool) []*sarama.ResourceAcls {
	acl := func(typ sarama.AclResourceType, name string, pattern sarama.AclResourcePatternType, ops ...sarama.AclOperation) *sarama.ResourceAcls {
		r := &sarama.ResourceAcls{Resource: sarama.Resource{ResourceType: typ, ResourceName: name, ResourcePatternType: pattern}}
		for _, op := range ops {
			r.Acls = append(r.Acls, &sarama.Acl{Host: "*", Operation: op, PermissionType: sarama.AclPermissionAllow})
		}
		return r
	}
	// READ and WRITE imply DESCRIBE; DescribeConfigs on the input is for
	// `processor run`'s retention check, on group- for the check of an
	// existing table's cleanup.policy.
	acls := []*sarama.ResourceAcls{
		acl(sarama.AclResourceTopic, input, sarama.AclPatternLiteral, sarama.AclOperationRead, sarama.AclOperationDescribeConfigs),
		acl(sarama.AclResourceTopic, output, sarama.AclPatternLiteral, sarama.AclOperationCreate, sarama.AclOperationWrite),
		acl(sarama.AclResourceTopic, group+"-", sarama.AclPatternPrefixed,
			sarama.AclOperationCreate, sarama.AclOperationRead, sarama.AclOperationWrite, sarama.AclOperationDescribeConfigs),
		acl(sarama.AclResourceGroup, group, sarama.AclPatternLiteral, sarama.AclOperationRead),
	}
	if eos {
		acls = append(acls, acl(sarama.AclResourceTransactionalID, group+"-", sarama.AclPatternPrefixed, sarama.AclOperationWrite))
	}
	return acls
}

// toolACLs are what `processor verify` (with --dlq) and `processor
// reset-offsets` need, as docs/security.md lists them.
func toolACLs(group, input, output string) []*sarama.ResourceAcls {
	read := func(typ sarama.AclResourceType, name string) *sarama.ResourceAcls {
		return &sarama.ResourceAcls{Resource: sarama.Resource{ResourceType: typ, ResourceName: name, ResourcePatternType: sarama.AclPatternLiteral},
			Acls: []*sarama.Acl{{Host: "*", Operation: sarama.AclOperationRead, PermissionType: sarama.AclPermissionAllow}}}
	}
	return []*sarama.ResourceAcls{read(sarama.AclResourceTopic, input), read(sarama.AclResourceTopic, output),
		read(sarama.AclResourceTopic, group+"-dlq"), read(sarama.AclResourceGroup, group)}
}

// grant gives user the ACLs, through brokers on which the test is a super
// user, and waits until the broker holds every one of them: the controller
// takes them, the broker applies them from the metadata log a moment later
// (a worker started at once was refused), and sarama's CreateACLs drops the
// per-ACL errors of the response.
func grant(t *testing.T, brokers []string, user string, acls []*sarama.ResourceAcls) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	principal := "User:" + user
	want := 0
	for _, r := range acls {
		for _, a := range r.Acls {
			a.Principal = principal
			want++
		}
	}
	if err := admin.CreateACLs(acls); err != nil {
		t.Fatalf("create ACLs for %s: %v", principal, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		held, err := admin.ListAcls(sarama.AclFilter{ResourceType: sarama.AclResourceAny, ResourcePatternTypeFilter: sarama.AclPatternAny,
			Principal: &principal, Operation: sarama.AclOperationAny, PermissionType: sarama.AclPermissionAny})
		if err != nil {
			t.Fatalf("list ACLs of %s: %v", principal, err)
		}
		got := 0
		for _, r := range held {
			got += len(r.Acls)
		}
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker holds %d ACLs for %s 10 s after they were created, want %d: %v", got, principal, want, held)
		}
		time.Sleep(50 * time.Millisecond) // polling the condition above
	}
	t.Cleanup(func() {
		if admin, err := sarama.NewClusterAdmin(brokers, kafkatest.Config()); err == nil {
			admin.DeleteACL(sarama.AclFilter{ResourceType: sarama.AclResourceAny, ResourcePatternTypeFilter: sarama.AclPatternAny,
				Principal: &principal, Operation: sarama.AclOperationAny, PermissionType: sarama.AclPermissionAny}, false)
			admin.Close()
		}
	})
}

// aclsString is the ACLs as the test log shows them.
func aclsString(acls []*sarama.ResourceAcls) string {
	s := ""
	for _, r := range acls {
		s += fmt.Sprintf("\n  %s %s (%s):", r.ResourceType.String(), r.ResourceName, r.ResourcePatternType.String())
		for _, a := range r.Acls {
			s += " " + a.Operation.String()
		}
	}
	return s
}

// without is acls less one operation on one resource.
func without(acls []*sarama.ResourceAcls, typ sarama.AclResourceType, name string, op sarama.AclOperation) []*sarama.ResourceAcls {
	var out []*sarama.ResourceAcls
	for _, r := range acls {
		c := &sarama.ResourceAcls{Resource: r.Resource}
		for _, a := range r.Acls {
			if r.ResourceType != typ || r.ResourceName != name || a.Operation != op {
				c.Acls = append(c.Acls, a)
			}
		}
		if len(c.Acls) > 0 {
			out = append(out, c)
		}
	}
	return out
}

// A user missing one of workerACLs stops the worker with the broker's
// refusal, at start or at the first refused request, in each runtime: no
// retry gets past a missing ACL, and a worker that waited (sarama fetches
// again every retry backoff; goka logs nothing) would look healthy while
// doing nothing.
func TestWorkerMissingAnACLStopsWithTheRefusal(t *testing.T) {
	sec := secureEnv(t)
	const input, output, txnIDs, groupTopics = "input", "output", "transactional IDs", "the group's topics"
	for _, tc := range []struct {
		name string
		typ  sarama.AclResourceType
		on   string // input, output, the group (""), txnIDs
		op   sarama.AclOperation
		eos  bool
		want error
	}{
		{"exactly-once, no READ on the input", sarama.AclResourceTopic, input, sarama.AclOperationRead, true, sarama.ErrTopicAuthorizationFailed},
		{"exactly-once, no WRITE on the output", sarama.AclResourceTopic, output, sarama.AclOperationWrite, true, sarama.ErrTopicAuthorizationFailed},
		{"exactly-once, no READ on the group", sarama.AclResourceGroup, "", sarama.AclOperationRead, true, sarama.ErrGroupAuthorizationFailed},
		{"exactly-once, no WRITE on the transactional IDs", sarama.AclResourceTransactionalID, txnIDs, sarama.AclOperationWrite, true, sarama.ErrTransactionalIDAuthorizationFailed},
		// The table exists (an earlier run made it): its cleanup.policy is checked.
		{"exactly-once, no DESCRIBE_CONFIGS on the group's topics", sarama.AclResourceTopic, groupTopics, sarama.AclOperationDescribeConfigs, true, sarama.ErrTopicAuthorizationFailed},
		{"best-effort, no DESCRIBE_CONFIGS on the group's topics", sarama.AclResourceTopic, groupTopics, sarama.AclOperationDescribeConfigs, false, sarama.ErrTopicAuthorizationFailed},
		{"best-effort, no READ on the input", sarama.AclResourceTopic, input, sarama.AclOperationRead, false, sarama.ErrTopicAuthorizationFailed},
		{"best-effort, no READ on the group", sarama.AclResourceGroup, "", sarama.AclOperationRead, false, sarama.ErrGroupAuthorizationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 3)
			group := e.group("acl")
			name := map[string]string{input: e.input, output: e.output, "": group, txnIDs: group + "-", groupTopics: group + "-"}[tc.on]
			if tc.on == groupTopics {
				if err := kafkatest.CreateTopicWith(e.brokers, group+"-table", 3, map[string]string{"cleanup.policy": "compact"}); err != nil {
					t.Fatal(err)
				}
			}
			acls := without(workerACLs(group, e.input, e.output, tc.eos), tc.typ, name, tc.op)
			if tc.on == input {
				// Still allowed to see the input (READ implied DESCRIBE):
				// the worker starts, and its fetches are refused.
				acls[0].Acls = append(acls[0].Acls, &sarama.Acl{Host: "*", Operation: sarama.AclOperationDescribe,
					PermissionType: sarama.AclPermissionAllow})
			}
			user, password := scramUser(t, sec, e.brokers, processor.SASLSCRAMSHA512)
			grant(t, e.brokers, user, acls)
			secured := processor.Security{TLS: processor.TLS{Enable: true, CAFile: sec.caFile},
				SASL: processor.SASL{Mechanism: processor.SASLSCRAMSHA512, User: user, Password: password}}
			e.produce(events("a", 10)...)
			topo := e.topology(group, &counter{})

			var run func(context.Context) error
			var err error
			if tc.eos {
				var p *processor.Processor
				if p, err = processor.New(t.Context(), processor.Config{Brokers: sec.brokers, StateDir: t.TempDir(),
					Security: secured, Group: processor.Group{SessionTimeout: 3 * time.Second}, Logger: topo.Logger}, topo); err == nil {
					run = p.Run
				}
			} else {
				var r *atleastonce.Runner
				if r, err = atleastonce.New(t.Context(), atleastonce.Config{Brokers: sec.brokers, StateDir: t.TempDir(),
					Security: secured, CommitInterval: 100 * time.Millisecond, Replication: -1, Logger: topo.Logger}, topo); err == nil {
					run = r.Run
				}
			}
			if err == nil { // refused while running, then
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				err = run(ctx)
				if ctx.Err() != nil {
					t.Fatalf("the worker still ran 60 s after it started, missing the ACL (returned %v)", err)
				}
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("worker stopped with %v, want %v", err, tc.want)
			}
			// The error names the code as Kafka does.
			if name := kafkautil.KafkaName(tc.want.(sarama.KError)); !strings.Contains(err.Error(), "("+name+")") {
				t.Fatalf("the error does not name %s: %v", name, err)
			}
			t.Logf("stopped with: %v", err)
		})
	}
}
