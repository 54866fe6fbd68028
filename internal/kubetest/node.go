package kubetest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ContainerLogsPattern is the http.ServeMux pattern of the kubelet request
// the API server makes for a pod's logs; the query carries the
// PodLogOptions (follow, tailLines, timestamps, ...).
const ContainerLogsPattern = "GET /containerLogs/{namespace}/{pod}/{container}"

// Node registers a Node whose kubelet is kubelet, served over TLS on
// 127.0.0.1 until t ends, and returns the Node's name. The API server
// forwards what it asks a pod's kubelet to it, pod logs above all (see
// ContainerLogsPattern), for pods whose spec.nodeName is that name: no
// scheduler runs, so a test names the node itself.
//
// The API server is not told the kubelet's CA, so it does not check the
// test server's certificate, as it does not by default.
func (s *Server) Node(t testing.TB, kubelet http.Handler) string {
	t.Helper()
	ks := httptest.NewTLSServer(kubelet)
	t.Cleanup(ks.Close)
	_, portStr, err := net.SplitHostPort(ks.Listener.Addr().String())
	if err != nil {
		t.Fatalf("kubelet address: %v", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatalf("kubelet port: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	nodes := s.Client(t).CoreV1().Nodes()
	node, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("node")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Node: %v", err)
	}
	// Where the API server finds a kubelet is status, written by the
	// kubelet itself in a real cluster.
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write the status of Node %s: %v", node.Name, err)
	}
	return node.Name
}
