package com.acme;

import static org.junit.Assert.assertEquals;

import org.junit.Test;

public class CalcTest {
    @Test
    public void adds() {
        assertEquals(3, Calc.add(1, 2));
    }

    @Test
    public void breaks() {
        assertEquals("the failing test of the cluster's build", 5, Calc.add(2, 2));
    }
}
